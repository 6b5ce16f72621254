"""Built-in scheduling plugins, one module each (registered in :mod:`igw.scheduling.builtin`)."""
