"""The back office's own date and time formats (settings.FORMAT_MODULE_PATH), one module per
language: the locale's formats would otherwise win over any *_FORMAT setting."""
