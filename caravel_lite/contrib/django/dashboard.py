"""caravel_lite's dashboard as a Django view, behind Django's staff authentication:
``path("ops/queue/", include("caravel_lite.contrib.django.urls"))``.

Only an active staff user gets through (``staff_member_required``: others are sent to
the admin's login page). The dashboard then reads and acts through a ``QueueAdmin`` on
a database of its own on the backend's database; its forms carry its own CSRF token,
keyed from ``SECRET_KEY`` so every process of the site accepts it."""
from __future__ import annotations

import io
import threading
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpRequest, HttpResponse
from django.utils.crypto import salted_hmac
from django.views.decorators.csrf import csrf_exempt

from caravel_lite.admin import QueueAdmin
from caravel_lite.contrib.django.compat import task_backends

__all__ = ["dashboard_view", "StaffUser"]

USER_KEY = "caravel_lite.django_user"
_dashboards: Dict[Tuple[str, bool, bool], Any] = {}
_lock = threading.Lock()


class StaffUser:
    """The dashboard's Authenticator: the staff user the view let through."""

    def authenticate(self, environ: Mapping[str, object]) -> Optional[str]:
        user = environ.get(USER_KEY)
        return str(user) if user else None


def _dashboard(alias: str, read_only: bool, show_payloads: bool) -> Any:
    from caravel_lite.web import wsgi_app

    key = (alias, read_only, show_payloads)
    with _lock:
        if key not in _dashboards:
            backend: Any = task_backends[alias]
            _dashboards[key] = wsgi_app(
                QueueAdmin(backend.open_database()), auth=StaffUser(), read_only=read_only,
                show_payloads=show_payloads,
                csrf_secret=salted_hmac("caravel_lite.contrib.django.dashboard", "csrf",
                                        algorithm="sha256").digest())
        return _dashboards[key]


def _environ(request: HttpRequest, path: str) -> Dict[str, Any]:
    environ = {key: value for key, value in request.META.items() if isinstance(key, str)}
    body = request.body
    prefix = request.path[:len(request.path) - len(path)].rstrip("/")
    environ.update({
        "SCRIPT_NAME": prefix, "PATH_INFO": "/" + path, "CONTENT_LENGTH": str(len(body)),
        "wsgi.input": io.BytesIO(body), "wsgi.url_scheme": request.scheme,
        "wsgi.errors": environ.get("wsgi.errors") or io.StringIO(),
        USER_KEY: request.user.get_username(),
    })
    return environ


def _view(request: HttpRequest, path: str = "", backend: str = "default",
          read_only: bool = False, show_payloads: bool = False) -> HttpResponse:
    answer: Dict[str, Any] = {}

    def start_response(status: str, headers: List[Tuple[str, str]],
                       exc_info: Any = None) -> Any:
        answer["status"], answer["headers"] = status, headers
        return lambda data: None

    app = _dashboard(backend, read_only, show_payloads)
    body = b"".join(app(_environ(request, path), start_response))
    response = HttpResponse(body, status=int(answer["status"].split()[0]))
    for name, value in answer["headers"]:
        if name.lower() == "set-cookie":
            # Django sends cookies from response.cookies, one header each.
            response.cookies.load(value)
        else:
            response[name] = value
    return response


# Staff only (others go to the admin's login page); not Django's CSRF check, since the
# dashboard checks its own token on every POST.
dashboard_view: Callable[..., HttpResponse] = csrf_exempt(staff_member_required(_view))
