"""The tenant console: a web page served by the gateway (same token, same namespace) listing
the tenant's jobs and showing one job's curves, events and checkpoints, with cancel, pause
and resume. The page is static HTML + JS; everything it shows comes from the API."""
