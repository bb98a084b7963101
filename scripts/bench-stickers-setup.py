#!/usr/bin/env python3
"""Setup for scripts/bench-stickers: 50 packs of 30 stickers (packs 25-49 premium, included in pro_monthly), a user on
pro_monthly; prints "TOKEN ETAG BYTES" of that user's catalog. Images are small PNGs written here (zlib, no libraries)."""
import glob, json, os, re, struct, sys, time, urllib.request, uuid, zlib

base, key, mail = sys.argv[1], sys.argv[2], sys.argv[3]


def png(width, height, seed):
    rows = b"".join(b"\x00" + bytes(((x * 7 + y * 3 + seed) % 256, (x + seed) % 256, (y * 5) % 256, 255) [i % 4] for x in range(width) for i in range(4)) for y in range(height))
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0)) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def call(method, path, body=None, token=None, content_type="application/json", headers=None):
    request = urllib.request.Request(base + path, data=body, method=method)
    if body is not None:
        request.add_header("Content-Type", content_type)
    if token:
        request.add_header("Authorization", "Bearer " + token)
    for name, value in (headers or {}).items():
        request.add_header(name, value)
    with urllib.request.urlopen(request, timeout=120) as response:
        return response.read(), response.headers


images = [png(200, 200, seed) for seed in range(30)]
for p in range(50):
    pack = {"id": f"pack-{p:02d}", "name": f"Pack {p}", "category": "emoji", "sortOrder": p}
    if p >= 25:
        pack["includedInPlans"] = ["pro_monthly"]
    call("POST", "/api/admin/stickers/packs", json.dumps(pack).encode(), key)
    for start in (0, 15):
        boundary = uuid.uuid4().hex
        body = b""
        for i in range(start, start + 15):
            body += (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"s{i:02d}.png\"\r\n\r\n").encode() + images[i] + b"\r\n"
        body += f"--{boundary}--\r\n".encode()
        call("POST", f"/api/admin/stickers/pack/pack-{p:02d}/stickers", body, key, f"multipart/form-data; boundary={boundary}")

email = "bench-stickers@example.com"
earlier = set(glob.glob(os.path.join(mail, "*.eml")))  # an earlier run's mail (the other engine) holds another code
call("POST", "/api/auth/sign-up", json.dumps({"email": email, "password": "correct horse battery", "name": "Bench"}).encode())
code = None
for _ in range(50):
    for path in sorted(set(glob.glob(os.path.join(mail, "*.eml"))) - earlier):
        found = re.search(r"code is (\d{6})", open(path).read())
        if found:
            code = found.group(1)
    if code:
        break
    time.sleep(0.1)
session = json.loads(call("POST", "/api/verify-otp", json.dumps({"email": email, "code": code}).encode())[0])
token = session["session"]["token"]
user = session["user"]["id"]
call("POST", f"/api/admin/users/{user}/subscription", json.dumps({"planId": "pro_monthly"}).encode(), key)
body, headers = call("GET", "/api/stickers/catalog", token=token)
assert len(json.loads(body)["categories"]) == 50
print(token, headers["ETag"], len(body))
