"""gradci's workers: Celery tasks that run jobs in the boxed runner, on a CPU or a GPU."""

if __name__ != "gradci.worker":  # the folder imported by its own name, the repository's root on sys.path
    raise ImportError(f"{__name__} is gradci.worker: import gradci.worker (under a second name its modules "
                      "would load twice, each copy with state of its own)")
