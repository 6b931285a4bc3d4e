from django.contrib import admin
from django.urls import re_path, path

from caravel_lite.contrib.django.dashboard import dashboard_view

urlpatterns = [
    path("admin/", admin.site.urls),
    re_path(r"^ops/(?P<backend>caravel_[a-z]+)/(?P<path>.*)$", dashboard_view),
]
