def label(area, name):
    return f"{area}/{name}"
