#!/usr/bin/env python3
"""Writes the tripwire's corpus, crates/cajaguard-core/tests/corpus/tripwire.jsonl, from SPEC §5's rules.

Each line is one case:
  {"expect": "refuse", "rule": "<Rule::as_str>", "form": "...", "text": "..."}   a string to put anywhere
  {"expect": "refuse", "rule": "...", "form": "...", "json": {...}}              a structure to put anywhere
  {"expect": "refuse", "rule": "...", "form": "...", "arguments": {...}}         a tool call's arguments
  {"expect": "pass", "form": "...", "text": "..."}                               must never be refused

The must-pass strings are what a careless rule would refuse: UUIDs, IMEIs (Luhn-valid by
construction), EAN-13 and ISBN-13 codes, millisecond timestamps, order numbers, phone numbers,
prices, over-long digit runs, and `live` in fields that are not secret-like.

Deterministic (seed 13): run it again and the file does not change. Usage:
  scripts/gen-tripwire-corpus.py            # rewrites the corpus
  scripts/gen-tripwire-corpus.py --check    # exits 1 if the committed corpus is stale
"""

import json
import random
import sys
from pathlib import Path

SEED = 13
OUT = Path(__file__).resolve().parent.parent / "crates/cajaguard-core/tests/corpus/tripwire.jsonl"
rng = random.Random(SEED)


def luhn_ok(digits: str) -> bool:
    total = 0
    for i, c in enumerate(reversed(digits)):
        d = int(c)
        if i % 2 == 1:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


def with_luhn(body: str) -> str:
    """`body` plus the check digit that makes it Luhn-valid."""
    for x in "0123456789":
        if luhn_ok(body + x):
            return body + x
    raise AssertionError(body)


def random_digits(n: int) -> str:
    return "".join(rng.choice("0123456789") for _ in range(n))


def card(prefix: str, length: int) -> str:
    return with_luhn(prefix + random_digits(length - len(prefix) - 1))


# Issuer prefixes with a length each brand issues (ISO/IEC 7812 ranges).
BRANDS = [
    ("visa", "4", 16), ("visa13", "4", 13), ("visa19", "4", 19), ("mastercard", "51", 16),
    ("mastercard2", "2221", 16), ("amex", "34", 15), ("amex37", "37", 15), ("discover", "6011", 16),
    ("unionpay", "62", 19), ("jcb", "3530", 16), ("diners", "36", 14), ("uatp", "1", 15),
    ("maestro", "6759", 18),
]


def group(digits: str, sizes, sep: str) -> str:
    out, i = [], 0
    for size in sizes:
        out.append(digits[i:i + size])
        i += size
    if i < len(digits):
        out.append(digits[i:])
    return sep.join(out)


def shift_digits(text: str, zero: int) -> str:
    return "".join(chr(zero + int(c)) if c.isdigit() else c for c in text)


def percent(text: str) -> str:
    return "".join(f"%{ord(c):02X}" if c.isdigit() or c in " _" else c for c in text)


cases = []


def refuse(rule, form, **case):
    cases.append({"expect": "refuse", "rule": rule, "form": form, **case})


def must_pass(form, text):
    cases.append({"expect": "pass", "form": form, "text": text})


# --- Card numbers, in every form SPEC §5 names -------------------------------------------------
for brand, prefix, length in BRANDS:
    pan = card(prefix, length)
    refuse("card_number", f"{brand}: contiguous", text=pan)
    refuse("card_number", f"{brand}: in free text", text=f"please charge card {pan} for the socks")
    refuse("card_number", f"{brand}: spaces in fours", text=group(pan, [4] * 5, " "))
    refuse("card_number", f"{brand}: hyphens", text=group(pan, [4] * 5, "-"))

pan = card("4", 16)
four = group(pan, [4, 4, 4, 4], " ")
SEPARATED = {
    "dots": ".", "double spaces": "  ", "tabs": "\t", "space and tab": " \t ", "newline": "\n",
    "no-break spaces": "\u00a0", "ideographic spaces": "\u3000", "narrow no-break": "\u202f",
    "non-breaking hyphen": "\u2011", "en dash": "\u2013", "minus sign": "\u2212",
    "zero-width space": "\u200b", "zero-width joiner": "\u200d", "zero-width non-joiner": "\u200c",
    "word joiner": "\u2060", "soft hyphen": "\u00ad", "left-to-right mark": "\u200e",
    "right-to-left mark": "\u200f", "bidi embedding": "\u202a", "bidi isolate": "\u2066",
    "BOM": "\ufeff", "variation selector": "\ufe0f", "space with zero-width space": " \u200b",
}
for name, sep in SEPARATED.items():
    refuse("card_number", f"separated by {name}", text=group(pan, [4, 4, 4, 4], sep))
for name, mark in {"acute": "\u0301", "keycap": "\u20e3", "two marks": "\u0300\u0323"}.items():
    refuse("card_number", f"combining {name} after each digit", text="".join(c + mark for c in pan))
for name, zero in {"full-width": 0xFF10, "Arabic-Indic": 0x660, "Extended Arabic-Indic": 0x6F0,
                   "Devanagari": 0x966, "Bengali": 0x9E6, "Thai": 0xE50, "mathematical bold": 0x1D7CE,
                   "mathematical monospace": 0x1D7F6}.items():
    refuse("card_number", f"{name} digits", text=shift_digits(four, zero))
refuse("card_number", "mixed digit scripts", text=pan[:4] + shift_digits(pan[4:8], 0x660) + shift_digits(pan[8:], 0xFF10))
refuse("card_number", "percent-encoded digits", text=percent(pan))
refuse("card_number", "percent-encoded spaces", text=four.replace(" ", "%20"))
refuse("card_number", "percent-encoded twice", text=percent(four).replace("%", "%25"))
refuse("card_number", "percent-encoded full-width digits",
       text="".join("%" + "%".join(f"{b:02X}" for b in chr(0xFF10 + int(c)).encode()) for c in pan))
refuse("card_number", "in a URL query", text=f"https://shop.example/pay?card={percent(four)}&x=1")
refuse("card_number", "followed by its CVC", text=f"{four} 123")
refuse("card_number", "followed by a 4-digit CVC", text=f"{four} 1234")
refuse("card_number", "followed by its expiry", text=f"{pan} 12/30")
refuse("card_number", "followed by its expiry, hyphenated", text=f"{pan}-12-2030")
refuse("card_number", "preceded by a short number", text=f"7 {pan}")
refuse("card_number", "preceded by a quantity, grouped", text=f"2 {four}")
refuse("card_number", "amex grouped 4-6-5 with CVC", text=group(card("37", 15), [4, 6, 5], " ") + " 4321")
refuse("card_number", "JSON integer", json={"n": int(card("4", 16))})
refuse("card_number", "JSON integer, amex", json={"n": int(card("34", 15))})
refuse("card_number", "JSON integral float", json={"n": float(int(card("4", 16)))})
refuse("card_number", "as an object key", json={four: True})
refuse("card_number", "deep in arrays", json={"a": [[[{"b": [f"x {pan} y"]}]]]})

# --- Live keys and live secrets ----------------------------------------------------------------
tail = "".join(rng.choice("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") for _ in range(24))
for prefix in ["sk_live_", "rk_live_", "SK_LIVE_", "Rk_Live_"]:
    refuse("live_key_prefix", f"{prefix} in text", text=f"use {prefix}{tail} for the order")
refuse("live_key_prefix", "zero-width space inside the prefix", text=f"sk_\u200blive_{tail}")
refuse("live_key_prefix", "soft hyphen inside the prefix", text=f"sk\u00ad_live_{tail}")
refuse("live_key_prefix", "full-width prefix", text=f"ｓｋ＿ｌｉｖｅ＿{tail}")
refuse("live_key_prefix", "percent-encoded underscores", text=f"sk%5Flive%5F{tail}")
refuse("live_key_prefix", "percent-encoded letters", text="".join(f"%{ord(c):02x}" for c in "sk_live_") + tail)
refuse("live_key_prefix", "in a URL", text=f"https://api.example/v1?key=rk%5Flive%5F{tail}")
refuse("live_key_prefix", "as an object key", json={f"sk_live_{tail}": 1})

for key in ["api_key", "apiKey", "API-KEY", "client_secret", "Authorization", "password", "accessToken",
            "x-api-key", "privateKey", "session_token", "credential"]:
    refuse("live_secret", f"{key}: a live- value", json={key: f"live-{tail}"})
refuse("live_secret", "live value in an array under a secret name", json={"api_key": ["test", f"pk_live_{tail}"]})
refuse("live_secret", "live value in a nested object under a secret name",
       json={"secrets": {"stripe": {"current": f"{tail}_live"}}})
refuse("live_secret", "live value deep under a secret name",
       json={"auth": [{"a": [{"b": {"c": [f"x.live.{tail}"]}}]}]})
refuse("live_secret", "live value as a key under a secret name", json={"token": {"live": 1}})
refuse("live_secret", "percent-encoded live under a secret name", json={"api_key": f"%6Cive-{tail}"})
refuse("live_secret", "zero-width space in live under a secret name", json={"api_key": f"li\u200bve-{tail}"})
refuse("live_secret", "full-width live under a secret name", json={"apiKey": f"ｌｉｖｅ-{tail}"})
refuse("live_secret", "zero-width space in the secret name", json={"api\u200b_key": f"live-{tail}"})

# --- Card credentials by field name, any case ------------------------------------------------------
for field in ["cvc", "CVC", "Cvv", "cryptogram", "Cryptogram", "CRYPTOGRAM", "card_number", "CardNumber", "PAN"]:
    refuse("card_credential", f"{field} anywhere", json={"details": {field: "x"}})
for field in ["number", "Number", "NUMBER", "network_token"]:
    refuse("card_credential", f"{field} in a credential", json={"credential": {"type": "token", field: "x"}})
refuse("card_credential", "credential of type CARD", json={"payment_credential": {"type": "CARD"}})
refuse("card_credential", "cvc with a zero-width space", json={"c\u200bvc": "123"})


def instruments(*instrument):
    return {"id": "gid://fixture/Checkout/1", "checkout": {"payment": {"instruments": list(instrument)}}}


OK_CRED = {"type": "token", "token": "cg_test_abcdefgh1"}
refuse("handler_not_test", "Shop Pay handler", arguments=instruments(
    {"id": "i1", "handler_id": "com.shopify.shop_pay", "type": "card", "credential": OK_CRED}))
refuse("token_not_test", "token not matching the test pattern", arguments=instruments(
    {"id": "i1", "handler_id": "fixture_test_handler", "type": "card", "credential": {"type": "token", "token": "tok_abc"}}))
refuse("card_credential", "upper-case CVC in the instrument's credential", arguments=instruments(
    {"id": "i1", "handler_id": "fixture_test_handler", "type": "card",
     "credential": {"type": "token", "token": "cg_test_abcdefgh1", "CVC": "123"}}))
refuse("card_credential", "credential type PAN", arguments=instruments(
    {"id": "i1", "handler_id": "fixture_test_handler", "type": "card", "credential": {"type": "PAN"}}))

# --- Must pass ---------------------------------------------------------------------------------
def uuid4() -> str:
    h = "%032x" % rng.getrandbits(128)
    h = h[:12] + "4" + h[13:16] + rng.choice("89ab") + h[17:]
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


for _ in range(40):
    must_pass("UUIDv4", uuid4())
must_pass("UUIDv4 in text", f"idempotency key {uuid4()}, retry of {uuid4()}")
must_pass("all-digit UUID", "12345678-1234-4234-8234-123456789012")
for _ in range(6):
    u = "".join(rng.choice("0123456789") for _ in range(32))
    must_pass("all-digit UUID, random", f"{u[:8]}-{u[8:12]}-{u[12:16]}-{u[16:20]}-{u[20:]}")
# IMEIs: 8-digit TAC (reporting bodies 35, 86, 01, 99, 49, 30, 44, 45, 50-54), serial, Luhn digit.
for rb in ["35", "86", "01", "99", "49", "30", "44", "45", "50", "53", "35", "86"]:
    imei = with_luhn(rb + random_digits(12))
    must_pass("IMEI", imei)
    must_pass("IMEI, hyphenated", f"{imei[:2]}-{imei[2:8]}-{imei[8:14]}-{imei[14]}")
    must_pass("IMEI in text", f"device IMEI {imei}")


def ean13(body12: str) -> str:
    s = sum(int(c) * (3 if i % 2 else 1) for i, c in enumerate(body12))
    return body12 + str((10 - s % 10) % 10)


for country in ["00", "01", "03", "30", "37", "50", "54", "57", "69", "76", "80", "87", "90", "93", "94"]:
    must_pass("EAN-13", ean13(country + random_digits(10)))
for _ in range(10):
    must_pass("ISBN-13", ean13(rng.choice(["978", "979"]) + random_digits(9)))
    isbn = ean13("978" + random_digits(9))
    must_pass("ISBN-13, hyphenated", f"ISBN {isbn[:3]}-{isbn[3]}-{isbn[4:7]}-{isbn[7:12]}-{isbn[12]}")
for _ in range(20):
    must_pass("millisecond timestamp", str(rng.randrange(1_500_000_000_000, 2_100_000_000_000)))
must_pass("millisecond timestamp in JSON text", '{"ts": 1764607365129}')
for _ in range(10):
    must_pass("order number", f"ORD-{rng.randrange(2020, 2030)}-{random_digits(6)}")
    must_pass("order number", f"#{random_digits(7)}")
    must_pass("order reference", f"Order reference {random_digits(2)}-{random_digits(4)}-{random_digits(4)}")
for _ in range(5):
    must_pass("phone number", f"+1 {random_digits(3)} 555 {random_digits(4)}")
    must_pass("phone number", f"+44 20 {random_digits(4)} {random_digits(4)}")
    must_pass("phone number", f"({random_digits(3)}) 555-{random_digits(4)}")
    must_pass("phone number", f"+81 3-{random_digits(4)}-{random_digits(4)}")
    must_pass("phone number", f"+86 138 {random_digits(4)} {random_digits(4)}")
for _ in range(10):
    must_pass("price", f"USD {rng.randrange(1, 99999)}.{random_digits(2)}")
    must_pass("price", f"{rng.randrange(1, 999)},{random_digits(3)},{random_digits(3)}.{random_digits(2)} JPY")
    must_pass("price in minor units", str(rng.randrange(1, 10**9)))
for _ in range(15):
    must_pass("over-long digit run", random_digits(rng.randrange(20, 41)))
must_pass("over-long run holding a card", "9" + card("4", 16) + "999")
must_pass("card-like digits joined by two separators", group(pan, [8, 8], " - "))
must_pass("card-like digits, Luhn broken", pan[:-1] + str((int(pan[-1]) + 1) % 10))
must_pass("a card number cut short", pan[:12])
must_pass("date and time", "2026-12-01 17:30:00.123")
must_pass("tracking number", "1Z 999 AA1 01 2345 6784")
must_pass("live in free text", "live music tonight, olive oil, delivery by friday")
must_pass("live under a field that is not secret-like", "live")
must_pass("sk_test key", "sk_test_" + tail)
must_pass("test token", "cg_test_abcdefgh1")


def main() -> int:
    text = "".join(json.dumps(c, ensure_ascii=False, sort_keys=True) + "\n" for c in cases)
    if "--check" in sys.argv:
        if not OUT.exists() or OUT.read_text(encoding="utf-8") != text:
            print(f"{OUT} is stale: run scripts/gen-tripwire-corpus.py", file=sys.stderr)
            return 1
        return 0
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {len(cases)} cases to {OUT.relative_to(Path.cwd()) if OUT.is_relative_to(Path.cwd()) else OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
