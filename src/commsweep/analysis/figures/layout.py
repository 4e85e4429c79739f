"""What makes a drawn figure hard to read, found from matplotlib's extents (pixels): a legend
over data, tick labels of one axis over each other, text outside the figure. The tests draw
every figure of a sweep and ask (tests/test_figures.py)."""

from __future__ import annotations


def layout_problems(fig) -> list[str]:
    """The problems of ``fig``: a legend over data (a bar, a line or a marker of an axes),
    tick labels of one axis over each other, text outside the figure. Empty for a figure
    without such problems."""
    if not hasattr(fig.canvas, "get_renderer"):  # a closed figure: draw it again off screen
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        FigureCanvasAgg(fig)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    every_axes = [a for ax in fig.axes for a in (ax, *ax.child_axes)]  # secondary axes are children
    undrawn = _undrawn_tick_labels(every_axes)
    return [*_legends_over_data(fig, renderer), *_tick_labels_over_each_other(every_axes, undrawn, renderer),
            *_text_off_the_figure(fig, undrawn, renderer)]


def _legends_over_data(fig, renderer) -> list[str]:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Rectangle

    found = []
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend() is not None)]
    for legend in legends:
        box = legend.get_window_extent(renderer)
        for ax in fig.axes:
            for artist in [*ax.patches, *ax.lines]:
                if isinstance(artist, Rectangle) and (artist.get_width() == 0 or artist.get_height() == 0):
                    continue
                if isinstance(artist, Line2D) and not len(artist.get_xdata()):
                    continue
                extent = artist.get_window_extent(renderer)
                if extent.width > 0.5 and extent.height > 0.5 and box.overlaps(extent):
                    found.append(f"the legend covers data of the axes titled {ax.get_title()!r}")
                    break
    return found


def _undrawn_tick_labels(every_axes) -> set[int]:
    """Tick labels outside the axis' view: kept by matplotlib but not drawn."""
    undrawn = set()
    for ax in every_axes:
        for axis in (ax.xaxis, ax.yaxis):
            low, high = sorted(axis.get_view_interval())
            for tick in axis.get_major_ticks():
                if not low - 1e-9 <= tick.get_loc() <= high + 1e-9:
                    undrawn.update({id(tick.label1), id(tick.label2)})
    return undrawn


def _tick_labels_over_each_other(every_axes, undrawn: set[int], renderer) -> list[str]:
    found = []
    for ax in every_axes:
        for axis in (ax.xaxis, ax.yaxis):
            labels = [t for t in axis.get_ticklabels() if t.get_visible() and t.get_text() and id(t) not in undrawn]
            extents = [t.get_window_extent(renderer) for t in labels]
            for (a, ea), (b, eb) in zip(zip(labels, extents), zip(labels[1:], extents[1:])):
                if ea.overlaps(eb):
                    found.append(f"tick labels {a.get_text()!r} and {b.get_text()!r} overlap in {ax.get_title()!r}")
    return found


def _text_off_the_figure(fig, undrawn: set[int], renderer) -> list[str]:
    found = []
    width, height = fig.canvas.get_width_height()
    for text in fig.findobj(lambda a: hasattr(a, "get_text") and hasattr(a, "get_window_extent")):
        if not text.get_visible() or not text.get_text().strip() or id(text) in undrawn:
            continue
        e = text.get_window_extent(renderer)
        if e.x0 < -1 or e.y0 < -1 or e.x1 > width + 1 or e.y1 > height + 1:
            found.append(f"text {text.get_text()!r} runs off the figure")
    return found
