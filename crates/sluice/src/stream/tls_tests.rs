use super::*;
use crate::stream::Stream;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

fn acceptor() -> Acceptor {
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(ck.key_pair.serialize_der()));
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![ck.cert.der().clone()], key)
        .unwrap();
    Acceptor::new(Arc::new(cfg))
}

/// A client's TLS connection to a fresh acceptor, and the accepted server side.
async fn pair() -> (tokio_rustls::client::TlsStream<TcpStream>, ServerTls) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let acc = acceptor();
    let server = tokio::spawn(async move {
        let (tcp, _) = l.accept().await.unwrap();
        acc.accept(tcp).await.unwrap()
    });
    let tcp = TcpStream::connect(addr).await.unwrap();
    let connector = crate::tls::connector(None).unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let client = connector.connect(name, tcp).await.unwrap();
    (client, server.await.unwrap())
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
    assert_eq!(s.held(), 0, "an idle connection holds no buffers");
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
