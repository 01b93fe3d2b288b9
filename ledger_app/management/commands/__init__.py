"""One module per manage.py command; the modules whose names start with _ are what
several commands share."""
