"""One module per chapter homework; each defines ``HOMEWORK`` (see ``registry``)."""
