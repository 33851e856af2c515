use super::*;
use crate::stream::Stream;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

type Client = tokio_rustls::client::TlsStream<TcpStream>;

/// An acceptor with a fresh certificate, and the certificate.
fn acceptor_and_cert() -> (Acceptor, rustls::pki_types::CertificateDer<'static>) {
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(ck.key_pair.serialize_der()));
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let cert = ck.cert.der().clone();
    let cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.clone()], key)
        .unwrap();
    (Acceptor::new(cfg), cert)
}

fn acceptor() -> Acceptor {
    acceptor_and_cert().0
}

/// A client's TLS connection to a fresh acceptor, and the accepted server side.
async fn pair() -> (Client, ServerTls) {
    pair_with(acceptor(), crate::tls::connector(None).unwrap()).await
}

async fn pair_with(acc: Acceptor, connector: tokio_rustls::TlsConnector) -> (Client, ServerTls) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (tcp, _) = l.accept().await.unwrap();
        acc.accept(tcp).await.unwrap()
    });
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let client = connector.connect(name, tcp).await.unwrap();
    (client, server.await.unwrap())
}

/// A client that offers only `suite`, over the protocol version it belongs to.
async fn pair_on(suite: rustls::CipherSuite) -> (Client, ServerTls) {
    let (acc, cert) = acceptor_and_cert();
    let mut provider = rustls::crypto::aws_lc_rs::default_provider();
    provider.cipher_suites.retain(|s| s.suite() == suite);
    let version = match provider.cipher_suites[..] {
        [rustls::SupportedCipherSuite::Tls13(_)] => &rustls::version::TLS13,
        [rustls::SupportedCipherSuite::Tls12(_)] => &rustls::version::TLS12,
        _ => panic!("{suite:?} not offered"),
    };
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert).unwrap();
    let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(&[version])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    pair_with(acc, tokio_rustls::TlsConnector::from(Arc::new(cfg))).await
}

/// Statements' worth each way, then the client closes.
async fn exchange(client: &mut Client, server: &mut Stream, rounds: usize) {
    for i in 0..rounds {
        let ask: Vec<u8> = (0..100 + i * 997).map(|b| (b * 3 + i) as u8).collect();
        client.write_all(&ask).await.unwrap();
        client.flush().await.unwrap();
        assert_eq!(read_n(server, ask.len()).await, ask);
        let answer: Vec<u8> = (0..50 + i * 4099).map(|b| (b * 5 + i) as u8).collect();
        server.write_all(&answer).await.unwrap();
        server.flush().await.unwrap();
        let mut got = vec![0u8; answer.len()];
        client.read_exact(&mut got).await.unwrap();
        assert_eq!(got, answer);
    }
}

#[tokio::test]
async fn every_suite_rustls_offers_carries_bytes_both_ways() {
    use rustls::CipherSuite as S;
    for suite in [
        S::TLS13_AES_128_GCM_SHA256,
        S::TLS13_AES_256_GCM_SHA384,
        S::TLS13_CHACHA20_POLY1305_SHA256,
        S::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        S::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
        S::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    ] {
        let (mut client, server) = pair_on(suite).await;
        assert_eq!(
            client
                .get_ref()
                .1
                .negotiated_cipher_suite()
                .unwrap()
                .suite(),
            suite
        );
        let mut server = Stream::TlsServer(Box::new(server));
        exchange(&mut client, &mut server, 8).await;
        if client.get_ref().1.protocol_version() == Some(rustls::ProtocolVersion::TLSv1_3) {
            // The client's key update (asking for ours): the next keys, both ways.
            for _ in 0..3 {
                client.get_mut().1.refresh_traffic_keys().unwrap();
                exchange(&mut client, &mut server, 2).await;
            }
        }
        client.shutdown().await.unwrap();
        let mut rest = Vec::new();
        assert_eq!(server.read_to_end(&mut rest).await.unwrap(), 0, "{suite:?}");
    }
}

#[tokio::test]
async fn at_the_key_limit_tls13_updates_its_key_and_tls12_ends() {
    let (mut client, mut server) = pair().await;
    server.records.limit_after(3);
    let mut server = Stream::TlsServer(Box::new(server));
    // Each answer is several records: the key changes more than once.
    exchange(&mut client, &mut server, 6).await;
    let Stream::TlsServer(s) = &server else {
        unreachable!()
    };
    assert!(
        s.records.sealed() <= 3,
        "the key was updated: its count began again"
    );
    let (mut client, mut server) =
        pair_on(rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256).await;
    server.records.limit_after(3);
    let mut server = Stream::TlsServer(Box::new(server));
    exchange(&mut client, &mut server, 1).await;
    let e = server
        .write_all(&[7u8; 40_000])
        .await
        .expect_err("past the limit");
    assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    // The client hears a close_notify.
    let mut rest = Vec::new();
    assert_eq!(client.read_to_end(&mut rest).await.unwrap(), 0);
}

/// Reads through the session's path (`Stream::poll_read_grow`) until `n` bytes came.
async fn read_n(s: &mut Stream, n: usize) -> Vec<u8> {
    let mut buf = BytesMut::new();
    while buf.len() < n {
        let got = std::future::poll_fn(|cx| s.poll_read_grow(cx, &mut buf, 16 * 1024))
            .await
            .unwrap();
        assert!(got > 0, "early end after {} of {n} bytes", buf.len());
    }
    buf.to_vec()
}

#[tokio::test]
async fn large_transfers_both_ways_and_nothing_held_between() {
    let (mut client, server) = pair().await;
    let mut server = Stream::TlsServer(Box::new(server));
    let data: Vec<u8> = (0..1_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let sent = data.clone();
    let writer = tokio::spawn(async move {
        for chunk in sent.chunks(40_000) {
            client.write_all(chunk).await.unwrap();
        }
        client.flush().await.unwrap();
        client
    });
    assert_eq!(read_n(&mut server, data.len()).await, data);
    let mut client = writer.await.unwrap();
    // The answer, as large, goes back in writes of all of it at once.
    let echo = tokio::spawn(async move {
        let mut got = vec![0u8; 1_000_000];
        client.read_exact(&mut got).await.unwrap();
        (client, got)
    });
    server.write_all(&data).await.unwrap();
    server.flush().await.unwrap();
    let (mut client, got) = echo.await.unwrap();
    assert_eq!(got, data);
    let Stream::TlsServer(s) = &server else {
        unreachable!()
    };
    assert_eq!(
        s.held(),
        0,
        "an idle connection holds no buffers, nor their box"
    );
    // A statement's worth each way after a key update from the client.
    client.get_mut().1.refresh_traffic_keys().unwrap();
    client.write_all(b"after the key update").await.unwrap();
    client.flush().await.unwrap();
    assert_eq!(read_n(&mut server, 20).await, b"after the key update");
    server.write_all(b"answer").await.unwrap();
    server.flush().await.unwrap();
    let mut answer = [0u8; 6];
    client.read_exact(&mut answer).await.unwrap();
    assert_eq!(&answer, b"answer");
    // The client's close_notify ends the stream; ours goes back.
    client.shutdown().await.unwrap();
    let mut rest = Vec::new();
    assert_eq!(server.read_to_end(&mut rest).await.unwrap(), 0);
    server.shutdown().await.unwrap();
    let mut tail = Vec::new();
    assert_eq!(client.read_to_end(&mut tail).await.unwrap(), 0);
}

#[tokio::test]
async fn bytes_right_after_the_handshake_are_kept() {
    // The client's first bytes may arrive with its Finished: the handshake must keep
    // them for the first read.
    let (mut client, server) = pair().await;
    client.write_all(b"startup").await.unwrap();
    client.flush().await.unwrap();
    let mut server = Stream::TlsServer(Box::new(server));
    let mut got = [0u8; 7];
    server.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"startup");
}

#[tokio::test]
async fn not_tls_or_gone_mid_handshake_is_an_error() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let acc = acceptor();
    let mut c = TcpStream::connect(addr).await.unwrap();
    let (tcp, _) = l.accept().await.unwrap();
    c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    assert!(acc.accept(tcp).await.is_err());
    // A ClientHello cut short, then the client leaves.
    let mut c = TcpStream::connect(addr).await.unwrap();
    let (tcp, _) = l.accept().await.unwrap();
    c.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01])
        .await
        .unwrap();
    drop(c);
    let e = acc.accept(tcp).await.err().expect("an error");
    assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
}

#[tokio::test]
async fn a_bad_record_fails_the_connection_and_stays_failed() {
    let (client, server) = pair().await;
    let mut server = Stream::TlsServer(Box::new(server));
    // An application-data record that does not decrypt, written under the client's
    // TLS layer.
    let (mut tcp, _) = client.into_inner();
    tcp.write_all(&[0x17, 0x03, 0x03, 0x00, 0x20])
        .await
        .unwrap();
    tcp.write_all(&[0xAB; 0x20]).await.unwrap();
    let mut b = [0u8; 16];
    let e = server.read(&mut b).await.expect_err("an error");
    assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    // The client is told why (an alert record), and later calls give the same error
    // without touching rustls again.
    let mut alert = [0u8; 5];
    tcp.read_exact(&mut alert).await.unwrap();
    assert_eq!(alert[0], 0x17, "an encrypted alert record");
    assert!(server.read(&mut b).await.is_err());
    assert!(server.write_all(b"x").await.is_err());
    assert!(
        server.flush().await.is_err(),
        "what was unsent is lost: a flush says so"
    );
    assert!(server.shutdown().await.is_err());
    let Stream::TlsServer(s) = &server else {
        unreachable!()
    };
    assert_eq!(s.held(), 0);
    // A stream that ends inside a record is an error, not an end.
    let (client, server) = pair().await;
    let mut server = Stream::TlsServer(Box::new(server));
    let (mut tcp, _) = client.into_inner();
    tcp.write_all(&[0x17, 0x03, 0x03, 0x00, 0x20, 1, 2, 3])
        .await
        .unwrap();
    tcp.shutdown().await.unwrap();
    let e = server.read(&mut b).await.expect_err("an error");
    assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
}

/// Every idle TLS client holds one: 256 bytes is jemalloc's size class below 320.
/// (tokio's `TcpStream` is 32 bytes in the release build, more with some of the
/// features tests turn on.)
#[test]
fn a_connection_fits_in_256_bytes() {
    let rest = std::mem::size_of::<ServerTls>() - std::mem::size_of::<TcpStream>();
    assert!(rest <= 256 - 32, "{rest} bytes besides the socket");
}
