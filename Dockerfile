FROM python:3.11-slim
WORKDIR /app
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 RLVR_DATA_DIR=/data
COPY pyproject.toml README.md ./
COPY backend ./backend
COPY workers ./workers
COPY dashboard ./dashboard
COPY migrations ./migrations
RUN pip install --no-cache-dir -e . && mkdir -p /data
EXPOSE 8000
CMD ["rlvr-explorer", "api", "--host", "0.0.0.0", "--port", "8000"]
