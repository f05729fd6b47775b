from django.urls import path

from examples.django_project.shop import views

urlpatterns = [path("orders/", views.create_order)]
