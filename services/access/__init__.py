"""Who may read what: the asker of a request, what GitHub lets them see, and the one decision every
read of runs, cells, reports and history goes through."""
