"""Where the engines' tracebacks and warnings point: the engines' own Docker images install here."""

SITE = "/usr/local/lib/python3.12/dist-packages"
