"""A real SMTP server for the send_email tests (aiosmtpd).

Usage: smtp_server.py PORT OUTFILE
Accepts AUTH PLAIN/LOGIN for weir/s3cret-pass without TLS, refuses recipients at
nobody@..., and appends every delivered message to OUTFILE as a JSON line.
"""
import asyncio, json, sys

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword


class Handler:
    def __init__(self, out):
        self.out = out

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        if address.startswith("nobody@"):
            return "550 5.1.1 mailbox unavailable"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        with open(self.out, "a") as f:
            f.write(json.dumps({
                "from": envelope.mail_from,
                "to": envelope.rcpt_tos,
                "data": envelope.content.decode("utf8", errors="replace"),
                "auth": session.authenticated,
            }) + "\n")
        return "250 Message accepted for delivery"


def authenticator(server, session, envelope, mechanism, auth_data):
    ok = isinstance(auth_data, LoginPassword) and auth_data.login == b"weir" and auth_data.password == b"s3cret-pass"
    return AuthResult(success=ok)


async def main():
    port, out = int(sys.argv[1]), sys.argv[2]
    c = Controller(Handler(out), hostname="127.0.0.1", port=port,
                   authenticator=authenticator, auth_require_tls=False)
    c.start()
    print("READY", flush=True)
    await asyncio.Event().wait()


asyncio.run(main())
