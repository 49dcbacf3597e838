"""Trusting a private CA: the ``ssl`` and ``ca_file`` arguments of
:func:`mcpp.connect` and :func:`mcpp.publish`.

Without either, a ``wss://`` or ``https://`` gateway's certificate is
checked as :func:`ssl.create_default_context` checks it: against the
system's roots, which OpenSSL reads from ``SSL_CERT_FILE`` and
``SSL_CERT_DIR`` when they are set. ``ca_file`` adds the CA certificates
of a PEM file to those; ``ssl`` is a context of the caller's own, used as
it is.
"""

from __future__ import annotations

import ssl

__all__ = ["client_context"]


def client_context(context: ssl.SSLContext | None, ca_file: str | None) -> ssl.SSLContext | None:
    """The context a TLS connection is made with, or ``None`` for the
    default one (the system's roots). ``ca_file`` that cannot be read or
    holds no certificate raises (``OSError``, ``ssl.SSLError``)."""
    if context is not None and ca_file is not None:
        raise ValueError("give ssl or ca_file, not both: load the CA into your context with load_verify_locations")
    if ca_file is None:
        return context
    ctx = ssl.create_default_context()  # the system's roots, TLS 1.2 at least, host names checked
    ctx.load_verify_locations(cafile=ca_file)
    return ctx
