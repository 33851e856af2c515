use super::*;
use crate::consts::*;
use crate::testdata::{CLIENT_RESPONSE, HANDSHAKE, hex};
use proptest::prelude::*;

fn round_trip_hs(payload: &[u8]) -> HandshakeV10 {
    let hs = HandshakeV10::parse(payload).unwrap();
    let mut out = Vec::new();
    hs.encode(&mut out);
    assert_eq!(hex_of(&out), hex_of(payload));
    hs
}

fn hex_of(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn mariadb_10_11_handshake() {
    let hs = round_trip_hs(&hex(HANDSHAKE));
    assert_eq!(hs.server_version, b"5.5.5-10.11.19-MariaDB-0+deb12u1");
    assert_eq!(hs.connection_id, 11);
    assert_eq!(
        hs.auth_plugin_data,
        hex("39312b216045743c6a247234484e2f3f2e673e40")
    );
    // CLIENT_MYSQL cleared: the extended capabilities count.
    assert_eq!(hs.capabilities, 0x1d_81ff_f7fe);
    assert_eq!(hs.capabilities & CLIENT_MYSQL, 0);
    assert_ne!(hs.capabilities & MARIADB_CLIENT_CACHE_METADATA, 0);
    assert_ne!(hs.capabilities & CLIENT_DEPRECATE_EOF, 0);
    assert_eq!((hs.charset, hs.status), (8, SERVER_STATUS_AUTOCOMMIT));
    assert_eq!(hs.auth_plugin_name, b"mysql_native_password");
}

#[test]
fn mysql_8_handshake() {
    // A MySQL 8.0.39 greeting as captured on the wire (public test vector).
    let hs = round_trip_hs(&hex(
        "0a382e302e3339001c000000024439523e53074100ffffff0200ffdf150000000000000000000\
         07f14467e1b0b131d1c5c5c250063616368696e675f736861325f70617373776f726400",
    ));
    assert_eq!(hs.server_version, b"8.0.39");
    assert_eq!(hs.connection_id, 28);
    assert_eq!(
        hs.auth_plugin_data,
        [
            2, 68, 57, 82, 62, 83, 7, 65, 127, 20, 70, 126, 27, 11, 19, 29, 28, 92, 92, 37
        ]
    );
    // CLIENT_MYSQL set: the last reserved bytes are filler, no extended capabilities.
    assert_eq!(hs.capabilities, 0xdfff_ffff);
    assert_eq!((hs.charset, hs.status), (255, 2));
    assert_eq!(hs.auth_plugin_name, b"caching_sha2_password");
}

#[test]
fn old_and_odd_handshakes() {
    // MySQL 5.5.2 (the protocol documentation's example): no CLIENT_PLUGIN_AUTH.
    let hs = round_trip_hs(&hex(
        "0a352e352e322d6d32000b00000064764840492d434a00fff70802000000000000000000000000\
         00002a34647c635a776b345e5d3a00",
    ));
    assert_eq!(hs.server_version, b"5.5.2-m2");
    assert_eq!(hs.auth_plugin_data, b"dvH@I-CJ*4d|cZwk4^]:");
    assert_eq!(hs.capabilities, 0xf7ff);
    assert!(hs.auth_plugin_name.is_empty());
    // A plugin name without its NUL at the end of the packet (seen from some servers).
    let mut p = hex(HANDSHAKE);
    p.pop();
    assert_eq!(
        HandshakeV10::parse(&p).unwrap().auth_plugin_name,
        b"mysql_native_password"
    );
    assert_eq!(HandshakeV10::parse(&[9]), None);
    assert_eq!(HandshakeV10::parse(&hex(HANDSHAKE)[..40]), None);
}

#[test]
fn mariadb_client_response() {
    let p = hex(CLIENT_RESPONSE);
    let r = HandshakeResponse41::parse(&p).unwrap();
    assert_eq!(r.capabilities, 0x1d_00bf_a28c);
    assert_eq!((r.max_packet, r.charset), (1 << 20, 33));
    assert_eq!(r.username, b"u");
    // The scramble the real client computed for password "password"; the server
    // accepted it.
    assert_eq!(
        r.auth_response,
        hex("e58c082c50156f53bec087fd3c6bcaead4b683fc")
    );
    assert_eq!(r.database.as_deref(), Some(&b"t"[..]));
    assert_eq!(
        r.auth_plugin.as_deref(),
        Some(&b"mysql_native_password"[..])
    );
    let attrs: Vec<_> = r.attr_pairs().collect();
    assert_eq!(attrs.first(), Some(&(&b"_os"[..], &b"Linux"[..])));
    assert!(attrs.contains(&(&b"_client_name"[..], &b"libmariadb"[..])));
    assert_eq!(attrs.len(), 7);
    let mut out = Vec::new();
    r.encode(&mut out);
    assert_eq!(out, p);
    assert!(!is_ssl_request(&p));
}

#[test]
fn responses_in_each_auth_encoding() {
    for caps in [
        CLIENT_PROTOCOL_41 | CLIENT_MYSQL | CLIENT_SECURE_CONNECTION | CLIENT_PLUGIN_AUTH,
        CLIENT_PROTOCOL_41 | CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA | CLIENT_CONNECT_ATTRS,
        CLIENT_PROTOCOL_41 | CLIENT_MYSQL | CLIENT_CONNECT_WITH_DB,
    ] {
        let r = HandshakeResponse41 {
            capabilities: caps,
            max_packet: 1 << 24,
            charset: UTF8MB4_GENERAL_CI,
            username: b"alice".to_vec(),
            auth_response: if caps & CLIENT_SECURE_CONNECTION != 0 {
                vec![0, 1, 2, 0, 3]
            } else {
                b"scr".to_vec()
            },
            database: (caps & CLIENT_CONNECT_WITH_DB != 0).then(|| b"db".to_vec()),
            auth_plugin: (caps & CLIENT_PLUGIN_AUTH != 0).then(|| b"p".to_vec()),
            attrs: (caps & CLIENT_CONNECT_ATTRS != 0).then(|| b"\x01k\x01v".to_vec()),
        };
        let mut out = Vec::new();
        r.encode(&mut out);
        assert_eq!(HandshakeResponse41::parse(&out), Some(r));
    }
    // Optional fields the packet leaves out.
    let mut out = Vec::new();
    put_fixed_part(
        &mut out,
        CLIENT_PROTOCOL_41 | CLIENT_MYSQL | CLIENT_CONNECT_WITH_DB,
        0,
        8,
    );
    out.extend_from_slice(b"bob\0scr\0");
    let r = HandshakeResponse41::parse(&out).unwrap();
    assert_eq!((r.database, r.auth_response), (None, b"scr".to_vec()));
    // Pre-4.1 responses are not supported.
    out[1] = 0;
    assert_eq!(HandshakeResponse41::parse(&out), None);
}

#[test]
fn ssl_request() {
    let req = SslRequest {
        capabilities: CLIENT_PROTOCOL_41 | CLIENT_SSL | MARIADB_CLIENT_PROGRESS,
        max_packet: 1 << 24,
        charset: 45,
    };
    let mut out = Vec::new();
    req.encode(&mut out);
    assert_eq!(out.len(), 32);
    assert!(is_ssl_request(&out));
    assert_eq!(SslRequest::parse(&out), Some(req));
    // With CLIENT_MYSQL set, bytes 28..32 are filler.
    out[0] |= 1;
    out[28] = 0xFF;
    assert_eq!(
        SslRequest::parse(&out).map(|r| r.capabilities),
        Some(CLIENT_PROTOCOL_41 | CLIENT_SSL | CLIENT_MYSQL)
    );
    out[1] &= !0x08;
    assert!(!is_ssl_request(&out));
    assert!(!is_ssl_request(&out[..31]));
}

#[test]
fn auth_packets() {
    // MariaDB's answer to COM_CHANGE_USER naming a plugin it does not use for the user.
    let p = hex(
        "fe6d7973716c5f6e61746976655f70617373776f726400624e4033224c397873573b5d46262b4456\
         61665e00",
    );
    let sw = AuthSwitchRequest::parse(&p).unwrap();
    assert_eq!(sw.plugin, b"mysql_native_password");
    assert_eq!(sw.data.len(), 21);
    assert_eq!(sw.scramble(), b"bN@3\"L9xsW;]F&+DVaf^");
    let mut out = Vec::new();
    sw.encode(&mut out);
    assert_eq!(out, p);
    let old = AuthSwitchRequest::parse(&[0xFE]).unwrap();
    assert_eq!((old.plugin, old.data), (&b""[..], &b""[..]));
    assert_eq!(AuthSwitchRequest::parse(&[0x01]), None);

    let more = AuthMoreData::parse(&[0x01, 0x03]).unwrap();
    assert_eq!(more.data, [3]);
    let mut out = Vec::new();
    more.encode(&mut out);
    assert_eq!(out, [1, 3]);
    assert_eq!(AuthMoreData::parse(&[0xFE]), None);
}

proptest! {
    #[test]
    fn handshake_round_trips(
        version in proptest::collection::vec(1u8.., 0..40),
        id in any::<u32>(),
        scramble in proptest::collection::vec(any::<u8>(), 20),
        caps in any::<u64>(),
        charset in any::<u8>(),
        status in any::<u16>(),
        plugin in proptest::collection::vec(1u8.., 0..30),
    ) {
        let caps = caps | CLIENT_SECURE_CONNECTION;
        let caps = if caps & CLIENT_MYSQL != 0 { caps & 0xFFFF_FFFF } else { caps };
        let hs = HandshakeV10 {
            server_version: version,
            connection_id: id,
            auth_plugin_data: scramble,
            capabilities: caps,
            charset,
            status,
            auth_plugin_name: if caps & CLIENT_PLUGIN_AUTH != 0 { plugin } else { Vec::new() },
        };
        let mut out = Vec::new();
        hs.encode(&mut out);
        prop_assert_eq!(HandshakeV10::parse(&out), Some(hs));
    }

    #[test]
    fn parsers_never_panic(p in proptest::collection::vec(any::<u8>(), 0..120)) {
        let _ = HandshakeV10::parse(&p);
        let _ = HandshakeResponse41::parse(&p);
        let _ = SslRequest::parse(&p);
        let _ = AuthSwitchRequest::parse(&p);
        let _ = AuthMoreData::parse(&p);
    }
}

#[test]
fn change_user_round_trip_and_truncation() {
    let caps = CLIENT_PROTOCOL_41 | CLIENT_SECURE_CONNECTION | CLIENT_PLUGIN_AUTH;
    let cu = ChangeUser {
        username: b"second".to_vec(),
        auth_response: vec![1, 0, 2, 3],
        database: b"test".to_vec(),
        charset: Some(45),
        auth_plugin: Some(b"mysql_native_password".to_vec()),
    };
    let mut body = Vec::new();
    cu.encode(caps, &mut body);
    assert_eq!(ChangeUser::parse(&body, caps), Some(cu.clone()));
    // An old client stops after the database.
    let short = ChangeUser {
        charset: None,
        auth_plugin: None,
        ..cu
    };
    let mut body = Vec::new();
    short.encode(caps, &mut body);
    assert_eq!(ChangeUser::parse(&body, caps), Some(short));
    // Truncated inside the user name or the answer: not a packet.
    assert_eq!(ChangeUser::parse(b"second", caps), None);
    assert_eq!(ChangeUser::parse(b"second\0\x09ab", caps), None);
    // A lone half of the character set is malformed.
    assert_eq!(ChangeUser::parse(b"u\0\0db\0\x2d", caps), None);
}
