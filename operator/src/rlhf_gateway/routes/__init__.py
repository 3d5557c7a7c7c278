"""The HTTP routes, one module per resource (files, fine-tuning jobs, their progress, models,
graders): thin handlers over the pure translation modules of the package. A new module (the
console's pages, say) defines an `APIRouter` that depends on `deps.TenantDep` for the same
authentication, and is added to the list `app.create_app` includes."""
