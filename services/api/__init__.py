"""The REST API: ``create_app`` builds the FastAPI application; one router per resource."""
