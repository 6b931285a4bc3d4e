"""``path("ops/queue/", include("caravel_lite.contrib.django.urls"))`` mounts the
dashboard of the ``default`` backend behind staff authentication. For another backend
or a read-only dashboard, route to ``dashboard_view`` with keyword arguments:
``re_path(r"^ops/queue/(?P<path>.*)$", dashboard_view, {"backend": "emails",
"read_only": True})``."""
from django.urls import re_path

from caravel_lite.contrib.django.dashboard import dashboard_view

app_name = "caravel_lite"
urlpatterns = [re_path(r"^(?P<path>.*)$", dashboard_view, name="dashboard")]
