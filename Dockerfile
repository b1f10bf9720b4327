# One image for every service (api, worker, migrate): the service's command picks the role.
# No EXPOSE: it is image-wide and the worker listens on nothing; the API's port (8000)
# is published by docker-compose.yml.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    RLVR_DATA_DIR=/data

# 1. Dependencies only, from pyproject.toml at the versions of constraints.txt (those CI
#    tested): this layer stays cached until either changes, so a code-only change
#    rebuilds in seconds.
COPY pyproject.toml constraints.txt /tmp/
RUN python -c "import tomllib; p = tomllib.load(open('/tmp/pyproject.toml', 'rb')); \
print('\n'.join(p['build-system']['requires'] + p['project']['dependencies']))" > /tmp/requirements.txt \
 && pip install -c /tmp/constraints.txt -r /tmp/requirements.txt \
 && rm /tmp/requirements.txt /tmp/pyproject.toml /tmp/constraints.txt \
 && useradd --system --uid 10001 --user-group --home-dir /data --no-create-home rlvr \
 && mkdir -p /data \
 && chown rlvr:rlvr /data

# 2. The project itself, as a regular (non-editable) install; migrations are package data.
#    The replay's compiled loop is compiled here, into the image, not by a user's request.
COPY . /src
RUN pip install --no-deps --no-build-isolation /src \
 && rm -rf /src \
 && cd / && python -m core.simulator.warm

# A non-root user owning the data folder (a new named volume takes this ownership).
USER rlvr
WORKDIR /data
CMD ["rlvr-explorer", "api", "--host", "0.0.0.0", "--port", "8000"]
