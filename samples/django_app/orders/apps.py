from django.apps import AppConfig


class OrdersConfig(AppConfig):  # type: ignore[misc]
    name = "orders"
    default_auto_field = "django.db.models.BigAutoField"
