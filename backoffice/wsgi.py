from django.core.wsgi import get_wsgi_application

from backoffice.startup import settings_or_exit

settings_or_exit()
application = get_wsgi_application()
