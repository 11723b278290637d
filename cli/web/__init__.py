"""`hpcmem serve`: the lab lead's web console (Starlette + Jinja2, installed by the `web` extra)."""
