"""Imported by no scenario."""


def nothing():
    return 0
