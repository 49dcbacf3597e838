"""A gateway serving TLS (``--tls-cert``, ``--tls-key``) whose certificate a
private CA signed: the client trusts it with ``ca_file`` or ``ssl`` (for
``wss://`` and for ``https://`` publishes), or with ``SSL_CERT_FILE`` for
the whole process, and refuses it otherwise. The CA and the certificate,
for 127.0.0.1, are made with the openssl command."""

from __future__ import annotations

import ssl
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import PYTHON, Gateway, _start, python_env
from helpers import next_envelope, next_of

import mcpp

# What openssl req reads: a CA's extensions and a server certificate's for 127.0.0.1.
OPENSSL_CONFIG = """[req]
distinguished_name = dn
prompt = no
[dn]
CN = mcpp test
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[leaf]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
"""


@dataclass
class TestCA:
    """A CA of the test's own (``ca_file``) and a certificate it signed
    for 127.0.0.1 (``cert``, ``key``)."""

    __test__ = False  # not a test class, whatever its name
    ca_file: str
    cert: str
    key: str


def make_ca(d: Path) -> TestCA:
    """Makes a CA and a certificate for 127.0.0.1 in ``d`` with openssl
    (OpenSSL 3: ``req -CA``)."""
    config = d / "openssl.cnf"
    config.write_text(OPENSSL_CONFIG)
    new_key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1"]
    req = ["openssl", "req", "-x509", "-config", str(config)]
    try:
        subprocess.run(
            [*req, "-extensions", "ca", *new_key, "-keyout", str(d / "ca.key"), "-out", str(d / "ca.pem"), "-subj", "/CN=mcpp-py-test-ca"],
            check=True,
            capture_output=True,
        )
        subprocess.run(
            [*req, "-extensions", "leaf", *new_key, "-keyout", str(d / "key.pem"), "-out", str(d / "cert.pem"), "-subj", "/CN=127.0.0.1"]
            + ["-CA", str(d / "ca.pem"), "-CAkey", str(d / "ca.key")],
            check=True,
            capture_output=True,
        )
    except (OSError, subprocess.CalledProcessError) as exc:
        stderr = getattr(exc, "stderr", b"") or b""
        raise RuntimeError(f"the TLS tests make their CA with the openssl command (OpenSSL 3): {exc}\n{stderr.decode(errors='replace')}") from exc
    return TestCA(ca_file=str(d / "ca.pem"), cert=str(d / "cert.pem"), key=str(d / "key.pem"))


@dataclass
class TLSGateway:
    gateway: Gateway
    ca: TestCA

    @property
    def wss(self) -> str:
        return f"wss://{self.gateway.addr}"

    @property
    def https(self) -> str:
        return f"https://{self.gateway.addr}"


@pytest.fixture(scope="module")
def tls_gateway(gateway_bin: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TLSGateway]:
    """A gateway serving TLS with a certificate of a CA of its own."""
    ca = make_ca(tmp_path_factory.mktemp("tls-ca"))
    g = _start(gateway_bin, tmp_path_factory, "tls", "--tls-cert", ca.cert, "--tls-key", ca.key)
    yield TLSGateway(g, ca)
    g.stop()


@pytest.fixture
def other_ca(tmp_path: Path) -> TestCA:
    """Another CA, which did not sign the gateway's certificate."""
    return make_ca(tmp_path)


async def test_wss_with_a_private_ca(tls_gateway: TLSGateway, pod: str) -> None:
    context = ssl.create_default_context()
    context.load_verify_locations(cafile=tls_gateway.ca.ca_file)
    async with mcpp.connect(tls_gateway.wss, pod=pod, participant="bob", ca_file=tls_gateway.ca.ca_file) as bob:
        async with mcpp.connect(tls_gateway.wss + "/ws", pod=pod, participant="alice", ssl=context) as alice:
            assert (await next_envelope(bob)).kind == "system/welcome"
            await alice.send({"kind": "chat", "payload": {"text": "over TLS"}})
            got = await next_of(bob, "chat")
            assert (got.from_, got.payload) == ("alice", {"text": "over TLS"})


async def test_wss_refuses_a_certificate_it_does_not_trust(tls_gateway: TLSGateway, other_ca: TestCA, pod: str) -> None:
    with pytest.raises(ssl.SSLCertVerificationError):
        await mcpp.connect(tls_gateway.wss, pod=pod, participant="eve", reconnect=False)
    with pytest.raises(ssl.SSLCertVerificationError):
        await mcpp.connect(tls_gateway.wss, pod=pod, participant="eve", reconnect=False, ca_file=other_ca.ca_file)
    # Plain ws:// on the TLS port is not served.
    with pytest.raises(Exception):
        await mcpp.connect(f"ws://{tls_gateway.gateway.addr}", pod=pod, participant="eve", reconnect=False, open_timeout=5)


async def test_publish_over_https_with_a_private_ca(tls_gateway: TLSGateway, other_ca: TestCA, pod: str) -> None:
    async with mcpp.connect(tls_gateway.wss, pod=pod, participant="bob", ca_file=tls_gateway.ca.ca_file) as bob:
        [one] = await mcpp.publish(tls_gateway.https, {"kind": "chat", "payload": {"text": "posted"}}, pod=pod, participant="ci", ca_file=tls_gateway.ca.ca_file)
        assert "error" not in one, one
        got = await next_of(bob, "chat")
        assert (got.from_, got.payload) == ("ci", {"text": "posted"})
        context = ssl.create_default_context(cafile=tls_gateway.ca.ca_file)
        [two] = await mcpp.publish(tls_gateway.wss, {"kind": "chat"}, pod=pod, participant="ci", ssl=context)
        assert "error" not in two, two

    with pytest.raises(ssl.SSLCertVerificationError):
        await mcpp.publish(tls_gateway.https, {"kind": "chat"}, pod=pod, participant="ci")
    with pytest.raises(ssl.SSLCertVerificationError):
        await mcpp.publish(tls_gateway.https, {"kind": "chat"}, pod=pod, participant="ci", ca_file=other_ca.ca_file)


def test_ssl_cert_file_is_honoured(tls_gateway: TLSGateway, pod: str) -> None:
    """OpenSSL's SSL_CERT_FILE, read by the default context: a process
    started with the CA in it trusts the gateway without ca_file."""
    script = f"""
import asyncio, mcpp
async def main():
    async with mcpp.connect({tls_gateway.wss!r}, pod={pod!r}, participant="env", reconnect=False) as c:
        [r] = await mcpp.publish({tls_gateway.https!r}, {{"kind": "chat"}}, pod={pod!r}, participant="env")
        print(c.id, r.get("error", "published"))
asyncio.run(main())
"""
    ok = subprocess.run([PYTHON, "-c", script], env=python_env(SSL_CERT_FILE=tls_gateway.ca.ca_file), capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and ok.stdout.strip() == "env published", ok.stderr
    env = python_env()
    env.pop("SSL_CERT_FILE", None)
    refused = subprocess.run([PYTHON, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and "CERTIFICATE_VERIFY_FAILED" in refused.stderr, refused.stderr


def test_ca_file_and_ssl_together_or_a_bad_file(tls_gateway: TLSGateway, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="ssl or ca_file"):
        mcpp.connect(tls_gateway.wss, pod="lab", ssl=ssl.create_default_context(), ca_file=tls_gateway.ca.ca_file)
    not_pem = tmp_path / "ca.pem"
    not_pem.write_text("not a certificate\n")
    with pytest.raises(ssl.SSLError):
        mcpp.connect(tls_gateway.wss, pod="lab", ca_file=str(not_pem))
    with pytest.raises(FileNotFoundError):
        mcpp.connect(tls_gateway.wss, pod="lab", ca_file=str(tmp_path / "missing.pem"))
