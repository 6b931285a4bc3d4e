"""A module that fails while it is imported, as an application module with a bug would."""
raise RuntimeError("the application module is broken")
