"""gradci's dashboard: server-rendered pages over the database the API writes."""

if __name__ != "gradci.web":  # the folder imported by its own name, the repository's root on sys.path
    raise ImportError(f"{__name__} is gradci.web: import gradci.web (under a second name its modules "
                      "would load twice, each copy with state of its own)")
