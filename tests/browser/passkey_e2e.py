#!/usr/bin/env python3
"""End to end: a passkey approval in a real browser (SPEC §6 "Approvals an agent cannot make").

Headless Debian Chromium, driven over the DevTools protocol with a virtual authenticator
(WebAuthn.addVirtualAuthenticator: ctap2, internal, resident key, user verification on), against
`cajaguard web` and the fixture shop behind `cajaguard mcp` (through the demo agent):

1. register the first passkey through the one-time link of `cajaguard passkey add`;
2. block a Day pack (USD 89.00, over the USD 50.00 threshold), open its request page (a screenshot
   of it can be saved with --screenshot), approve with the passkey; the agent's retry is
   `allow_approved`;
3. the same with the authenticator's user verification off: the page's approval is refused and
   the retry stays blocked;
4. with approvals.require "passkey", a key-file approval is refused: `cajaguard approve` exits 2,
   and one written under require "any" does not let the payment through.

Prints `SKIPPED: ...` and exits 0 when chromium is absent (the only reason to skip). Needs the
`websockets` package (tests/clients/requirements.txt); tests/browser/run.sh installs it.

    passkey_e2e.py --bin target/debug [--screenshot docs/approval-page.png]
"""

import argparse
import base64
import itertools
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STEP_TIMEOUT = 30.0  # seconds any one wait may take (a page load, a ceremony, a process)


def fail(message):
    print(f"FAILED: {message}", flush=True)
    sys.exit(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, probe, timeout=STEP_TIMEOUT):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.1)
    fail(f"timed out waiting for {what}")


class Cdp:
    """A minimal DevTools client: one browser websocket, one flattened page session."""

    def __init__(self, ws_url):
        from websockets.sync.client import connect

        self.ws = connect(ws_url, max_size=64 * 1024 * 1024, open_timeout=STEP_TIMEOUT)
        self.ids = itertools.count(1)
        self.session = None

    def call(self, method, params=None, session=True):
        msg_id = next(self.ids)
        msg = {"id": msg_id, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        self.ws.send(json.dumps(msg))
        deadline = time.monotonic() + STEP_TIMEOUT
        while time.monotonic() < deadline:
            reply = json.loads(self.ws.recv(timeout=STEP_TIMEOUT))
            if reply.get("id") == msg_id:
                if "error" in reply:
                    fail(f"{method}: {reply['error']}")
                return reply.get("result", {})
        fail(f"{method}: no answer")

    def open_page(self):
        target = self.call("Target.createTarget", {"url": "about:blank"}, session=False)
        attached = self.call(
            "Target.attachToTarget",
            {"targetId": target["targetId"], "flatten": True},
            session=False,
        )
        self.session = attached["sessionId"]
        self.call("Page.enable")
        self.call("Runtime.enable")

    def evaluate(self, expression):
        result = self.call(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True}
        )
        return result.get("result", {}).get("value")

    def goto(self, url):
        self.call("Page.navigate", {"url": url})
        wait_for(
            f"{url} to load",
            lambda: self.evaluate("document.readyState === 'complete' && location.href") == url,
        )

    def click_and_wait(self, selector):
        """Clicks the ceremony button and waits for the page's verdict (body[data-done])."""
        if not self.evaluate(f"!!document.querySelector({json.dumps(selector)})"):
            fail(f"no {selector} on {self.evaluate('location.href')}: "
                 f"{self.evaluate('document.body.innerText')[:400]}")
        self.evaluate(f"document.querySelector({json.dumps(selector)}).click()")
        done = wait_for(
            f"the page's answer to {selector}",
            lambda: self.evaluate("document.body.dataset.done || ''"),
        )
        message = self.evaluate("document.getElementById('cg-message').textContent")
        return done, message


class World:
    def __init__(self, args, tmp, require, with_keys=False):
        self.bin = Path(args.bin).resolve()
        self.tmp = tmp
        self.port = free_port()
        self.origin = f"http://localhost:{self.port}"
        config = json.loads((ROOT / "examples/cajaguard.demo.json").read_text())
        config["home"] = str(tmp / "home")
        config["downstream"]["args"] = ["--state", str(tmp / "shop")]
        config["approvals"] = {
            "trusted_keys": [str(tmp / "keys/approver.pub.pem")] if with_keys else [],
            "max_ttl_minutes": 15,
            "web": {"listen": f"127.0.0.1:{self.port}"},
            "require": require,
        }
        self.config = tmp / f"config-{require}.json"
        self.config.write_text(json.dumps(config))
        self.web = None

    def config_for(self, require):
        """The same home with another approvals.require (to write a key-file approval)."""
        config = json.loads(self.config.read_text())
        config["approvals"]["require"] = require
        path = self.tmp / f"config-{require}.json"
        path.write_text(json.dumps(config))
        return path

    def run(self, program, *args, config=None, check=True):
        cmd = [str(self.bin / program), *args, "--config", str(config or self.config)]
        env = dict(os.environ, CAJAGUARD_KEY_DIR=str(self.tmp / "keys"))
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
        if check and done.returncode not in (0, 3):
            fail(f"{' '.join(cmd)} exited {done.returncode}: {done.stdout}{done.stderr}")
        return done

    def start_web(self):
        self.web = subprocess.Popen(
            [str(self.bin / "cajaguard"), "web", "--config", str(self.config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

        def up():
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return True
            except OSError:
                return False

        wait_for("cajaguard web to listen", up)

    def stop(self):
        if self.web:
            self.web.terminate()
            self.web.wait(timeout=10)

    def buy_day_pack(self):
        out = self.run("cajaguard-demo", "buy", "Day pack").stdout
        verdict = re.search(r"^verdict: (\S+)", out, re.M)
        request = re.search(r"cg-[0-9a-f]{16}", out)
        checkout = re.search(r"gid://fixture/Checkout/\d+", out)
        if not (verdict and verdict.group(1) == "blocked" and request and checkout):
            fail(f"the Day pack was not blocked for approval:\n{out}")
        return request.group(0), checkout.group(0), out

    def pay(self, checkout):
        out = self.run("cajaguard-demo", "pay", checkout).stdout
        verdict = re.search(r"^verdict: (\S+)", out, re.M)
        reason = re.search(r"^reason: (\S+)", out, re.M)
        return (verdict.group(1) if verdict else "?", reason.group(1) if reason else "?", out)


def start_chromium(tmp):
    profile = tmp / "chromium-profile"
    proc = subprocess.Popen(
        [
            shutil.which("chromium"),
            "--headless=new",
            "--no-sandbox",  # CI runs as root
            "--disable-gpu",
            "--no-first-run",
            "--remote-debugging-port=0",
            f"--user-data-dir={profile}",
            "--window-size=1100,1400",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        # Its own process group, so that stop_chromium reaches every process it started.
        start_new_session=True,
    )
    port_file = profile / "DevToolsActivePort"
    wait_for("chromium's DevTools port", port_file.exists)
    lines = wait_for(
        "DevToolsActivePort to be written",
        lambda: (port_file.read_text().split("\n") if port_file.stat().st_size else None),
    )
    return proc, f"ws://127.0.0.1:{lines[0]}{lines[1]}"


def stop_chromium(proc):
    """Ends chromium and every process it started: a renderer or utility process left behind
    goes on writing into the profile, and removing the temporary folder then fails."""
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, 9)
    except ProcessLookupError:
        pass
    proc.wait(timeout=10)


def remove_tree(path):
    """Removes the test's folder; a process of chromium's that is still exiting may add a file
    while it is removed, so a failed attempt is tried again for a few seconds."""
    for attempt in itertools.count():
        try:
            shutil.rmtree(path)
            return
        except FileNotFoundError:
            return
        except OSError as e:
            if attempt >= 50:
                print(f"warning: could not remove {path}: {e}", flush=True)
                return
            time.sleep(0.1)


def add_authenticator(cdp, verified=True):
    cdp.call("WebAuthn.enable", {"enableUI": False})
    result = cdp.call(
        "WebAuthn.addVirtualAuthenticator",
        {
            "options": {
                "protocol": "ctap2",
                "transport": "internal",
                "hasResidentKey": True,
                "hasUserVerification": True,
                "isUserVerified": verified,
                "automaticPresenceSimulation": True,
            }
        },
    )
    return result["authenticatorId"]


def register(world, cdp):
    link = world.run("cajaguard", "passkey", "add", "--name", "e2e laptop").stdout.strip()
    if not link.startswith(f"{world.origin}/passkeys/register?token="):
        fail(f"passkey add printed {link!r}")
    cdp.goto(link)
    done, message = cdp.click_and_wait("#cg-register")
    if done != "ok":
        fail(f"registration refused: {message}")
    listed = world.run("cajaguard", "passkey", "list").stdout
    if "e2e laptop" not in listed:
        fail(f"passkey list does not show the new passkey: {listed}")


def scenario_approve(args, tmp, cdp):
    world = World(args, tmp / "approve", "passkey")
    try:
        world.start_web()
        add_authenticator(cdp)
        register(world, cdp)
        request_id, checkout, out = world.buy_day_pack()
        page = f"{world.origin}/requests/{request_id}"
        if page not in out:
            fail(f"the refusal does not send the human to {page}:\n{out}")
        cdp.goto(page)
        if args.screenshot:
            shot = cdp.call("Page.captureScreenshot", {"format": "png"})
            Path(args.screenshot).write_bytes(base64.b64decode(shot["data"]))
            print(f"saved a screenshot of the approval page to {args.screenshot}")
        done, message = cdp.click_and_wait("#cg-approve")
        if done != "ok":
            fail(f"the passkey approval was refused: {message}")
        verdict, reason, out = world.pay(checkout)
        if verdict != "allow_approved":
            fail(f"the retry after the passkey approval is {verdict}/{reason}:\n{out}")
        verify = world.run("cajaguard", "verify", request_id)
        print(f"ok: registered, blocked {request_id}, approved by passkey, paid ({reason}); "
              f"verify now says {verify.stdout.strip()!r}")
    finally:
        world.stop()


def scenario_unverified(args, tmp, cdp):
    world = World(args, tmp / "unverified", "passkey")
    try:
        world.start_web()
        authenticator = add_authenticator(cdp)
        register(world, cdp)
        request_id, checkout, _ = world.buy_day_pack()
        cdp.call(
            "WebAuthn.setUserVerified",
            {"authenticatorId": authenticator, "isUserVerified": False},
        )
        cdp.goto(f"{world.origin}/requests/{request_id}")
        done, message = cdp.click_and_wait("#cg-approve")
        if done == "ok":
            fail("an approval without user verification was accepted")
        verdict, reason, out = world.pay(checkout)
        if verdict != "blocked":
            fail(f"without user verification the retry is {verdict}/{reason}:\n{out}")
        print(f"ok: user verification off is refused ({message!r}); the retry is {verdict}/{reason}")
    finally:
        world.stop()


def scenario_key_file(args, tmp):
    keygen = subprocess.run(
        [str(Path(args.bin).resolve() / "cajaguard"), "keygen", "--out", str(tmp / "keyfile/keys")],
        capture_output=True, text=True, timeout=60,
    )
    world = World(args, tmp / "keyfile", "passkey", with_keys=True)
    if keygen.returncode != 0:
        fail(f"keygen: {keygen.stderr}")
    request_id, checkout, _ = world.buy_day_pack()
    refused = world.run("cajaguard", "approve", request_id, "--yes", check=False)
    if refused.returncode != 2 or "passkey" not in refused.stderr:
        fail(f"approve under require passkey exited {refused.returncode}: {refused.stderr}")
    # A key-file approval written all the same (under "any") must not count under "passkey".
    signed = world.run("cajaguard", "approve", request_id, "--yes", config=world.config_for("any"))
    if signed.returncode != 0:
        fail(f"approve under require any: {signed.stderr}")
    verdict, reason, out = world.pay(checkout)
    if verdict != "blocked":
        fail(f"a key-file approval let the payment through under require passkey: {verdict}/{reason}")
    print(f"ok: require passkey refuses the terminal (exit 2) and a key-file approval ({reason})")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", default=str(ROOT / "target/debug"))
    parser.add_argument("--screenshot")
    args = parser.parse_args()
    if not shutil.which("chromium"):
        print("SKIPPED: passkey browser test: chromium is not installed "
              "(apt-get install -y chromium)", flush=True)
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="cajaguard-browser-"))
    try:
        for sub in ("approve", "unverified", "keyfile"):
            (tmp / sub).mkdir()
        scenario_key_file(args, tmp)
        browser, ws_url = start_chromium(tmp)
        try:
            cdp = Cdp(ws_url)
            cdp.open_page()
            scenario_approve(args, tmp, cdp)
            cdp.open_page()
            scenario_unverified(args, tmp, cdp)
        finally:
            stop_chromium(browser)
    finally:
        remove_tree(tmp)
    print("browser: 3 passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
