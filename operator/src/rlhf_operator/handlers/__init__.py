"""kopf's side: thin handlers that hand every trigger to a controller, kopf's settings, start-up."""
