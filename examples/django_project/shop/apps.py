from django.apps import AppConfig


class ShopConfig(AppConfig):
    name = "examples.django_project.shop"
    label = "shop"
