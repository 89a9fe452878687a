"""Run by the image's Python (`python -m tests.deploy.default_tls_client SERVER STRANGER`), with
the image's CA settings: does aiohttp's default TLS verification accept a server whose CA is in
SSL_CERT_DIR only, and refuse one whose CA is nowhere?

SERVER and STRANGER are `cert.pem:key.pem` pairs, served on loopback. Prints `preloaded N` (the
CAs a default context holds before any verification), then `trusted STATUS` and
`stranger REASON`.
"""

from __future__ import annotations

import asyncio
import ssl
import sys

import aiohttp
from aiohttp import web


async def serve(pair: str) -> tuple[web.AppRunner, str]:
    certificate, key = pair.split(":")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certificate, key)
    app = web.Application()
    app.router.add_get("/", lambda _: web.Response(text="ok"))
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"https://127.0.0.1:{port}/"


async def main(server: str, stranger: str) -> None:
    print("preloaded", ssl.create_default_context().cert_store_stats()["x509_ca"])
    runners = []
    try:
        trusted_runner, trusted_url = await serve(server)
        stranger_runner, stranger_url = await serve(stranger)
        runners = [trusted_runner, stranger_runner]
        async with aiohttp.ClientSession() as session:
            async with session.get(trusted_url) as response:
                print("trusted", response.status)
            try:
                async with session.get(stranger_url) as response:
                    print("stranger", response.status)
            except aiohttp.ClientConnectorCertificateError as refused:
                print("stranger", refused.certificate_error.reason)
    finally:
        for runner in runners:
            await runner.cleanup()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
