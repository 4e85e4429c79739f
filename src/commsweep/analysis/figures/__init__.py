"""The sweep's figures, a module each, named as the figure.

``names.py`` spells each figure's name once; each figure's module draws it with the helpers
of ``canvas.py`` from the tables ``tables.py`` reads; ``plot.py`` finds a figure's drawing by
the word ``commsweep plot`` takes.
"""
