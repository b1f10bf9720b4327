"""Alembic migrations, shipped inside the installed package (found by backend.migrate
through importlib.resources, so a plain non-editable install can migrate)."""
