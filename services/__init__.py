"""gradci's server side: the REST API, GitHub, uploads, the database, the queues and the reports."""

if __name__ != "gradci.services":  # the folder imported by its own name, the repository's root on sys.path
    raise ImportError(f"{__name__} is gradci.services: import gradci.services (under a second name its modules "
                      "would load twice, each copy with state of its own)")
