"""Base types every layer uses: errors that name their input, atomic files, flags, the results layout, status files."""
