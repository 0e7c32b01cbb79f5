"""GitHub: signed webhooks in, commit statuses and one pull-request comment out."""
