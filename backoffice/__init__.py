"""The project's wiring: settings and the one reader of the environment, URLs, WSGI and
ASGI, the admin site."""
