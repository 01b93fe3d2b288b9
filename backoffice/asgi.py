from django.core.asgi import get_asgi_application

from backoffice.startup import settings_or_exit

settings_or_exit()
application = get_asgi_application()
