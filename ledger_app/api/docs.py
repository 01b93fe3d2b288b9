"""The published schema and its browsable page, answering errors as the API does."""

from collections.abc import Sequence

from drf_spectacular.views import SpectacularJSONAPIView, SpectacularSwaggerSplitView
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.throttling import BaseThrottle

from ledger_app.mixin_bases import ApiViewMixin


class _ReadOnlyPage(ApiViewMixin):
    """The schema and the docs page answer GET and HEAD. Any other method is a 405 in the
    API's JSON envelope, whatever the page itself renders (the docs page is HTML, whose
    renderer cannot show an error), so no /v1/ URL ever answers an error as HTML."""

    http_method_names: Sequence[str] = ["get", "head"]
    # Published documents, the same for everyone and needing no key: not counted against
    # a rate limit (that would be a database write per page view; the limits are per key).
    throttle_classes: Sequence[type[BaseThrottle]] = ()

    def handle_exception(self, exc: Exception) -> Response:
        response = super().handle_exception(exc)
        self.request.accepted_renderer = JSONRenderer()
        self.request.accepted_media_type = JSONRenderer.media_type
        return response


class SchemaView(_ReadOnlyPage, SpectacularJSONAPIView):
    pass


class DocsView(_ReadOnlyPage, SpectacularSwaggerSplitView):
    """Swagger UI with its start-up script served from ?script, not inline: the Content
    Security Policy runs scripts and styles from this site only."""

    template_name = "api/docs.html"
