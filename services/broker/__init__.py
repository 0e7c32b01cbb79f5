"""The queue between the server and its workers.

Task and queue names and the Celery configuration both ends share (``queues``), sending tasks by
name (``dispatch``), reading what the broker still holds (``messages``), and the embedded broker of
``gradci up`` without Redis (``embedded``).
"""
