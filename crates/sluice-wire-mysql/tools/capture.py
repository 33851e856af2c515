#!/usr/bin/env python3
"""Regenerates the captured vectors of src/testdata.rs (not run by the tests).

Talks the MySQL protocol by hand to a running MariaDB/MySQL server on 127.0.0.1:PORT
(argv[1], default 3306) as user `u` / password `password` with a database `t`
(LOAD DATA LOCAL needs local_infile=1), once without and once with
CLIENT_DEPRECATE_EOF, and prints one JSON line per response: [name, [payload hex...]].
The response to a command is whatever arrives before 0.4 s of silence.
"""
import hashlib, json, socket, struct, sys

PORT = int(sys.argv[1]) if len(sys.argv) > 1 else 3306


def native(pw, salt):
    a = hashlib.sha1(pw).digest()
    b = hashlib.sha1(salt + hashlib.sha1(a).digest()).digest()
    return bytes(x ^ y for x, y in zip(a, b))


class Conn:
    def __init__(self, caps, db=b"t", user=b"u", pw=b"password"):
        self.s = socket.create_connection(("127.0.0.1", PORT))
        self.s.settimeout(0.4)
        self.buf = b""
        _, hs = self.read()
        self.hs = hs
        i = hs.index(b"\0", 1)
        p = i + 1 + 4
        salt = hs[p:p + 8]
        p += 8 + 1 + 2 + 1 + 2 + 2 + 1 + 10
        salt += hs[p:p + 12]
        body = struct.pack("<IIB", caps & 0xFFFFFFFF, 1 << 24, 45) + b"\0" * 19
        body += struct.pack("<I", caps >> 32) + user + b"\0"
        ar = native(pw, salt)
        body += bytes([len(ar)]) + ar + db + b"\0" + b"mysql_native_password\0"
        self.send(body, 1)
        self.login = self.drain()

    def read(self):
        while True:
            if len(self.buf) >= 4:
                n = int.from_bytes(self.buf[:3], "little")
                if len(self.buf) >= 4 + n:
                    seq, p = self.buf[3], self.buf[4:4 + n]
                    self.buf = self.buf[4 + n:]
                    return seq, p
            d = self.s.recv(65536)
            if not d:
                raise socket.timeout
            self.buf += d

    def send(self, payload, seq=0):
        self.s.sendall(len(payload).to_bytes(3, "little") + bytes([seq]) + payload)

    def drain(self):
        out = []
        while True:
            try:
                out.append(self.read()[1])
            except socket.timeout:
                return out

    def cmd(self, payload):
        self.send(payload)
        return self.drain()


def emit(name, pkts):
    print(json.dumps([name, [p.hex() for p in pkts]]))


BASE = 1 | 8 | 0x80 | 0x200 | 0x2000 | 0x8000 | (1 << 16) | (1 << 17) | (1 << 18) | (1 << 19) | (1 << 23)
for dep in (False, True):
    c = Conn(BASE | ((1 << 24) if dep else 0))
    tag = "dep" if dep else "eof"
    q = lambda sql: c.cmd(b"\x03" + sql)
    if not dep:
        emit("handshake", [c.hs])
    for name, sql in [("select", b"SELECT 1 AS a, 'x' AS b"), ("do", b"DO 1"),
                      ("multi", b"SELECT 1; SET @x=1; SELECT 2"), ("err", b"SELECT * FROM nosuch"),
                      ("multi_err", b"SELECT 1; SELECT * FROM nosuch; SELECT 2"),
                      ("begin", b"BEGIN"), ("commit", b"COMMIT"), ("set_ac", b"SET autocommit=0"),
                      ("use", b"USE t")]:
        emit(f"{tag}:{name}", q(sql))
    q(b"SET autocommit=1")
    q(b"CREATE TABLE IF NOT EXISTS a (id int primary key, v varchar(10))")
    emit(f"{tag}:empty_select", q(b"SELECT * FROM a WHERE 1=0"))
    q(b"CREATE PROCEDURE IF NOT EXISTS p() BEGIN SELECT 1; SELECT 2; END")
    emit(f"{tag}:call", q(b"CALL p()"))
    prep = c.cmd(b"\x16SELECT ?, 1 AS c")
    emit(f"{tag}:prepare", prep)
    sid = prep[0][1:5]
    param = b"\x00\x01\x03\x00"  # null bitmap, new params bound, type LONG
    one = struct.pack("<I", 1)
    emit(f"{tag}:execute", c.cmd(b"\x17" + sid + b"\x00" + one + param + struct.pack("<i", 7)))
    emit(f"{tag}:execute_cursor", c.cmd(b"\x17" + sid + b"\x01" + one + param + struct.pack("<i", 8)))
    emit(f"{tag}:fetch", c.cmd(b"\x1c" + sid + struct.pack("<I", 10)))
    emit(f"{tag}:stmt_reset", c.cmd(b"\x1a" + sid))
    prep2 = c.cmd(b"\x16DO ?")
    emit(f"{tag}:prepare_do", prep2)
    emit(f"{tag}:execute_do", c.cmd(b"\x17" + prep2[0][1:5] + b"\x00" + one + param + struct.pack("<i", 7)))
    emit(f"{tag}:prepare_err", c.cmd(b"\x16SELECT * FROM nosuch"))
    c.cmd(b"\x19" + prep2[0][1:5])
    emit(f"{tag}:field_list", c.cmd(b"\x04a\0"))
    emit(f"{tag}:statistics", c.cmd(b"\x09"))
    emit(f"{tag}:ping", c.cmd(b"\x0e"))
    emit(f"{tag}:init_db", c.cmd(b"\x02t"))
    emit(f"{tag}:set_option", c.cmd(b"\x1b\x00\x00"))
    emit(f"{tag}:reset_conn", c.cmd(b"\x1f"))
    emit(f"{tag}:infile", q(b"LOAD DATA LOCAL INFILE 'x.csv' INTO TABLE a FIELDS TERMINATED BY ','"))
    c.send(b"1,one\n2,two\n", 2)
    c.send(b"", 3)
    emit(f"{tag}:infile_done", c.drain())
    # COM_CHANGE_USER naming another plugin, to get an AuthSwitchRequest.
    r = c.cmd(b"\x11u\0\0t\0" + struct.pack("<H", 45) + b"caching_sha2_password\0")
    emit(f"{tag}:change_user", r)
    salt = r[0][r[0].index(b"\0", 1) + 1:].rstrip(b"\0")
    c.send(native(b"password", salt), 2)
    emit(f"{tag}:change_user_done", c.drain())
