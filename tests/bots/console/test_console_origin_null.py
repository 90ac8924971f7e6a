"""A real browser posts the console's own forms with ``Origin: null`` (the pages'
Referrer-Policy is no-referrer, so the link's token never leaves in a Referer): such a POST
is accepted when the browser's Fetch Metadata says the form was the console's own
(``Sec-Fetch-Site: same-origin``), and refused otherwise (a sandboxed frame elsewhere sends
``Origin: null`` too)."""

from __future__ import annotations

from tests.bots.console.conftest import ALICE, Console


async def test_origin_null_is_decided_by_fetch_metadata(console: Console) -> None:
    token = await console.link(ALICE)
    for site in ("cross-site", "same-site", None):
        headers = {"Origin": "null", **({"Sec-Fetch-Site": site} if site else {})}
        r = await console.client.post("/signin", data={"token": token}, headers=headers,
                                      allow_redirects=False)
        assert r.status == 403 and not r.cookies, site
        assert "another site" in await r.text()
    # the link was not used by the refused ones: the console's own form signs in with it
    r = await console.client.post("/signin", data={"token": token}, allow_redirects=False,
                                  headers={"Origin": "null", "Sec-Fetch-Site": "same-origin"})
    assert r.status == 303 and r.cookies
