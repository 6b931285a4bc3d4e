from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    # caravel_lite's dashboard, for staff users only.
    path("ops/queue/", include("caravel_lite.contrib.django.urls")),
]
