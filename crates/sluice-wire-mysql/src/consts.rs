//! Numbers of the MySQL/MariaDB protocol: capability flags, server status flags, command
//! bytes, session-tracking entry types and the error codes Sluice sends itself.
//!
//! Capabilities are kept as a `u64`. The lower 32 bits are MySQL's; MariaDB (10.2 and
//! later) adds its own in the upper 32 bits. A MariaDB server announces them in the last
//! 4 bytes of the 10 reserved bytes of its HandshakeV10, and a client answers with its
//! own in bytes 28..32 of the HandshakeResponse41, in both cases only when the sender's
//! [`CLIENT_LONG_PASSWORD`] bit (which MariaDB calls `CLIENT_MYSQL`) is cleared: a
//! MariaDB server clears it to say "I have extended capabilities", and a MariaDB client
//! that sees this clears it too. With the bit set those 4 bytes are zero filler.

// Capability flags (lower 32 bits: MySQL).
pub const CLIENT_LONG_PASSWORD: u64 = 1;
/// MariaDB's name for bit 0: set by MySQL peers, cleared by MariaDB peers that use the
/// extended capabilities of the upper 32 bits.
pub const CLIENT_MYSQL: u64 = CLIENT_LONG_PASSWORD;
pub const CLIENT_FOUND_ROWS: u64 = 1 << 1;
pub const CLIENT_LONG_FLAG: u64 = 1 << 2;
pub const CLIENT_CONNECT_WITH_DB: u64 = 1 << 3;
pub const CLIENT_NO_SCHEMA: u64 = 1 << 4;
pub const CLIENT_COMPRESS: u64 = 1 << 5;
pub const CLIENT_ODBC: u64 = 1 << 6;
pub const CLIENT_LOCAL_FILES: u64 = 1 << 7;
pub const CLIENT_IGNORE_SPACE: u64 = 1 << 8;
pub const CLIENT_PROTOCOL_41: u64 = 1 << 9;
pub const CLIENT_INTERACTIVE: u64 = 1 << 10;
pub const CLIENT_SSL: u64 = 1 << 11;
pub const CLIENT_IGNORE_SIGPIPE: u64 = 1 << 12;
pub const CLIENT_TRANSACTIONS: u64 = 1 << 13;
pub const CLIENT_RESERVED: u64 = 1 << 14;
pub const CLIENT_SECURE_CONNECTION: u64 = 1 << 15;
pub const CLIENT_MULTI_STATEMENTS: u64 = 1 << 16;
pub const CLIENT_MULTI_RESULTS: u64 = 1 << 17;
pub const CLIENT_PS_MULTI_RESULTS: u64 = 1 << 18;
pub const CLIENT_PLUGIN_AUTH: u64 = 1 << 19;
pub const CLIENT_CONNECT_ATTRS: u64 = 1 << 20;
pub const CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA: u64 = 1 << 21;
pub const CLIENT_CAN_HANDLE_EXPIRED_PASSWORDS: u64 = 1 << 22;
pub const CLIENT_SESSION_TRACK: u64 = 1 << 23;
pub const CLIENT_DEPRECATE_EOF: u64 = 1 << 24;
/// MySQL 8: a column count packet carries a "metadata follows" byte.
pub const CLIENT_OPTIONAL_RESULTSET_METADATA: u64 = 1 << 25;
/// MySQL 8.0.18: the compressed protocol with zstd; the client's HandshakeResponse41
/// ends with the level byte. MariaDB leaves the bit unused.
pub const CLIENT_ZSTD_COMPRESSION_ALGORITHM: u64 = 1 << 26;
/// MySQL 8.0.23: COM_QUERY / COM_STMT_EXECUTE carry query attributes.
pub const CLIENT_QUERY_ATTRIBUTES: u64 = 1 << 27;
// MariaDB's extended capabilities (upper 32 bits).
pub const MARIADB_CLIENT_PROGRESS: u64 = 1 << 32;
pub const MARIADB_CLIENT_COM_MULTI: u64 = 1 << 33;
pub const MARIADB_CLIENT_STMT_BULK_OPERATIONS: u64 = 1 << 34;
pub const MARIADB_CLIENT_EXTENDED_TYPE_INFO: u64 = 1 << 35;
/// A column count packet carries a "metadata follows" byte (as MySQL's
/// [`CLIENT_OPTIONAL_RESULTSET_METADATA`]).
pub const MARIADB_CLIENT_CACHE_METADATA: u64 = 1 << 36;

/// The capabilities a proxy built on this crate relays end to end: it offers a client at
/// most these (and only those the server has too), and asks a server for no others.
/// Left out: compression (each leg has its own, see [`COMPRESSION_CAPS`]), MariaDB's
/// progress reports, COM_MULTI and metadata caching, MySQL's optional metadata and
/// query attributes; TLS is negotiated separately on each leg. MariaDB's bulk execution
/// (COM_STMT_BULK_EXECUTE) is relayed; a proxy asks every server connection for it, so
/// that any client that has it may run it on any connection of its pool.
pub const SLUICE_CAPS: u64 = CLIENT_LONG_PASSWORD
    | CLIENT_FOUND_ROWS
    | CLIENT_LONG_FLAG
    | CLIENT_CONNECT_WITH_DB
    | CLIENT_NO_SCHEMA
    | CLIENT_ODBC
    | CLIENT_LOCAL_FILES
    | CLIENT_IGNORE_SPACE
    | CLIENT_PROTOCOL_41
    | CLIENT_INTERACTIVE
    | CLIENT_IGNORE_SIGPIPE
    | CLIENT_TRANSACTIONS
    | CLIENT_RESERVED
    | CLIENT_SECURE_CONNECTION
    | CLIENT_MULTI_STATEMENTS
    | CLIENT_MULTI_RESULTS
    | CLIENT_PS_MULTI_RESULTS
    | CLIENT_PLUGIN_AUTH
    | CLIENT_CONNECT_ATTRS
    | CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA
    | CLIENT_CAN_HANDLE_EXPIRED_PASSWORDS
    | CLIENT_SESSION_TRACK
    | CLIENT_DEPRECATE_EOF
    | MARIADB_CLIENT_EXTENDED_TYPE_INFO
    | MARIADB_CLIENT_STMT_BULK_OPERATIONS;

/// COM_STMT_BULK_EXECUTE's flags (the two bytes after the statement id): the
/// parameter types follow (2 bytes a parameter); the server answers each row's outcome
/// (MariaDB 11.5 and later).
pub const STMT_BULK_FLAG_SEND_TYPES_TO_SERVER: u16 = 128;
pub const STMT_BULK_FLAG_SEND_UNIT_RESULTS: u16 = 64;

/// The compressed protocol: agreed on each leg by itself (Sluice offers it to every
/// client, and asks a server for it where configured).
pub const COMPRESSION_CAPS: u64 = CLIENT_COMPRESS | CLIENT_ZSTD_COMPRESSION_ALGORITHM;

// Server status flags (OK and EOF packets).
pub const SERVER_STATUS_IN_TRANS: u16 = 1;
pub const SERVER_STATUS_AUTOCOMMIT: u16 = 2;
pub const SERVER_MORE_RESULTS_EXISTS: u16 = 8;
pub const SERVER_STATUS_NO_GOOD_INDEX_USED: u16 = 0x10;
pub const SERVER_STATUS_NO_INDEX_USED: u16 = 0x20;
pub const SERVER_STATUS_CURSOR_EXISTS: u16 = 0x40;
pub const SERVER_STATUS_LAST_ROW_SENT: u16 = 0x80;
pub const SERVER_STATUS_DB_DROPPED: u16 = 0x100;
pub const SERVER_STATUS_NO_BACKSLASH_ESCAPES: u16 = 0x200;
pub const SERVER_STATUS_METADATA_CHANGED: u16 = 0x400;
pub const SERVER_QUERY_WAS_SLOW: u16 = 0x800;
pub const SERVER_PS_OUT_PARAMS: u16 = 0x1000;
pub const SERVER_STATUS_IN_TRANS_READONLY: u16 = 0x2000;
pub const SERVER_SESSION_STATE_CHANGED: u16 = 0x4000;

// Command bytes (the first byte of a client packet in the command phase).
pub const COM_SLEEP: u8 = 0x00;
pub const COM_QUIT: u8 = 0x01;
pub const COM_INIT_DB: u8 = 0x02;
pub const COM_QUERY: u8 = 0x03;
pub const COM_FIELD_LIST: u8 = 0x04;
pub const COM_CREATE_DB: u8 = 0x05;
pub const COM_DROP_DB: u8 = 0x06;
pub const COM_REFRESH: u8 = 0x07;
pub const COM_SHUTDOWN: u8 = 0x08;
pub const COM_STATISTICS: u8 = 0x09;
pub const COM_PROCESS_INFO: u8 = 0x0a;
pub const COM_CONNECT: u8 = 0x0b;
pub const COM_PROCESS_KILL: u8 = 0x0c;
pub const COM_DEBUG: u8 = 0x0d;
pub const COM_PING: u8 = 0x0e;
pub const COM_TIME: u8 = 0x0f;
pub const COM_DELAYED_INSERT: u8 = 0x10;
pub const COM_CHANGE_USER: u8 = 0x11;
pub const COM_BINLOG_DUMP: u8 = 0x12;
pub const COM_TABLE_DUMP: u8 = 0x13;
pub const COM_CONNECT_OUT: u8 = 0x14;
pub const COM_REGISTER_SLAVE: u8 = 0x15;
pub const COM_STMT_PREPARE: u8 = 0x16;
pub const COM_STMT_EXECUTE: u8 = 0x17;
pub const COM_STMT_SEND_LONG_DATA: u8 = 0x18;
pub const COM_STMT_CLOSE: u8 = 0x19;
pub const COM_STMT_RESET: u8 = 0x1a;
pub const COM_SET_OPTION: u8 = 0x1b;
pub const COM_STMT_FETCH: u8 = 0x1c;
pub const COM_DAEMON: u8 = 0x1d;
pub const COM_BINLOG_DUMP_GTID: u8 = 0x1e;
pub const COM_RESET_CONNECTION: u8 = 0x1f;
/// MariaDB: execute a prepared statement for an array of parameter sets.
pub const COM_STMT_BULK_EXECUTE: u8 = 0xfa;

/// COM_STMT_EXECUTE flags: open a read-only cursor (rows then come by COM_STMT_FETCH).
pub const CURSOR_TYPE_READ_ONLY: u8 = 1;

// Column types (`enum_field_types`), as column definitions and binary rows carry them.
pub const MYSQL_TYPE_DECIMAL: u8 = 0x00;
pub const MYSQL_TYPE_TINY: u8 = 0x01;
pub const MYSQL_TYPE_SHORT: u8 = 0x02;
pub const MYSQL_TYPE_LONG: u8 = 0x03;
pub const MYSQL_TYPE_FLOAT: u8 = 0x04;
pub const MYSQL_TYPE_DOUBLE: u8 = 0x05;
pub const MYSQL_TYPE_NULL: u8 = 0x06;
pub const MYSQL_TYPE_TIMESTAMP: u8 = 0x07;
pub const MYSQL_TYPE_LONGLONG: u8 = 0x08;
pub const MYSQL_TYPE_INT24: u8 = 0x09;
pub const MYSQL_TYPE_DATE: u8 = 0x0a;
pub const MYSQL_TYPE_TIME: u8 = 0x0b;
pub const MYSQL_TYPE_DATETIME: u8 = 0x0c;
pub const MYSQL_TYPE_YEAR: u8 = 0x0d;
pub const MYSQL_TYPE_VARCHAR: u8 = 0x0f;
pub const MYSQL_TYPE_BLOB: u8 = 0xfc;
pub const MYSQL_TYPE_VAR_STRING: u8 = 0xfd;
pub const MYSQL_TYPE_STRING: u8 = 0xfe;

// Entry types of the session-state information of an OK packet.
pub const SESSION_TRACK_SYSTEM_VARIABLES: u8 = 0;
pub const SESSION_TRACK_SCHEMA: u8 = 1;
pub const SESSION_TRACK_STATE_CHANGE: u8 = 2;
pub const SESSION_TRACK_GTIDS: u8 = 3;
pub const SESSION_TRACK_TRANSACTION_CHARACTERISTICS: u8 = 4;
pub const SESSION_TRACK_TRANSACTION_STATE: u8 = 5;

/// Collation ids worth naming.
pub const UTF8MB4_GENERAL_CI: u8 = 45;
pub const BINARY: u8 = 63;

// Error numbers Sluice sends itself; [`sqlstate`] gives their SQLSTATE.
pub const ER_CON_COUNT_ERROR: u16 = 1040;
pub const ER_HANDSHAKE_ERROR: u16 = 1043;
pub const ER_DBACCESS_DENIED_ERROR: u16 = 1044;
pub const ER_ACCESS_DENIED_ERROR: u16 = 1045;
pub const ER_UNKNOWN_COM_ERROR: u16 = 1047;
pub const ER_BAD_DB_ERROR: u16 = 1049;
pub const ER_NO_SUCH_THREAD: u16 = 1094;
pub const ER_NET_PACKET_TOO_LARGE: u16 = 1153;
pub const ER_NET_PACKETS_OUT_OF_ORDER: u16 = 1156;
pub const ER_NET_UNCOMPRESS_ERROR: u16 = 1157;
pub const ER_UNKNOWN_STMT_HANDLER: u16 = 1243;
pub const ER_QUERY_INTERRUPTED: u16 = 1317;
pub const ER_MALFORMED_PACKET: u16 = 1835;
/// MariaDB's "Connection was killed". Sluice's code too for a statement whose server
/// connection was lost under it (its outcome unknown).
pub const ER_CONNECTION_KILLED: u16 = 1927;
/// No server can take the statement ("can't connect": it never ran). The code ProxySQL
/// gives for a hostgroup it cannot reach; outside every range a client library keeps.
pub const ER_NO_SERVER: u16 = 9001;

/// Whether `code` is one that client libraries keep for errors of their own (MySQL's
/// 2000–2999, such as 2013 "Lost connection", and MariaDB Connector/C's 5000–5999).
/// MariaDB Connector/C 3.3.9 and later (CONC-648) take an ERR packet from the server
/// carrying one for a forgery and report "Received malformed packet" instead: no ERR
/// that Sluice writes may carry one.
pub fn is_client_code(code: u16) -> bool {
    matches!(code, 2000..=2999 | 5000..=5999)
}

/// The SQLSTATE of the error numbers above (`HY000`, "general error", for others).
pub fn sqlstate(code: u16) -> &'static [u8; 5] {
    match code {
        ER_CON_COUNT_ERROR => b"08004",
        ER_ACCESS_DENIED_ERROR => b"28000",
        ER_BAD_DB_ERROR | ER_DBACCESS_DENIED_ERROR => b"42000",
        ER_HANDSHAKE_ERROR
        | ER_UNKNOWN_COM_ERROR
        | ER_NET_PACKET_TOO_LARGE
        | ER_NET_PACKETS_OUT_OF_ORDER
        | ER_NET_UNCOMPRESS_ERROR
        | ER_MALFORMED_PACKET => b"08S01",
        ER_QUERY_INTERRUPTED | ER_CONNECTION_KILLED => b"70100",
        _ => b"HY000",
    }
}

/// MariaDB sends progress reports as ERR packets with this code (only to clients that
/// set [`MARIADB_CLIENT_PROGRESS`]); they do not end a response.
pub const PROGRESS_REPORT_CODE: u16 = 0xFFFF;

/// The name of a command byte, for logs.
pub fn command_name(cmd: u8) -> &'static str {
    const NAMES: [&str; 32] = [
        "COM_SLEEP",
        "COM_QUIT",
        "COM_INIT_DB",
        "COM_QUERY",
        "COM_FIELD_LIST",
        "COM_CREATE_DB",
        "COM_DROP_DB",
        "COM_REFRESH",
        "COM_SHUTDOWN",
        "COM_STATISTICS",
        "COM_PROCESS_INFO",
        "COM_CONNECT",
        "COM_PROCESS_KILL",
        "COM_DEBUG",
        "COM_PING",
        "COM_TIME",
        "COM_DELAYED_INSERT",
        "COM_CHANGE_USER",
        "COM_BINLOG_DUMP",
        "COM_TABLE_DUMP",
        "COM_CONNECT_OUT",
        "COM_REGISTER_SLAVE",
        "COM_STMT_PREPARE",
        "COM_STMT_EXECUTE",
        "COM_STMT_SEND_LONG_DATA",
        "COM_STMT_CLOSE",
        "COM_STMT_RESET",
        "COM_SET_OPTION",
        "COM_STMT_FETCH",
        "COM_DAEMON",
        "COM_BINLOG_DUMP_GTID",
        "COM_RESET_CONNECTION",
    ];
    match cmd {
        COM_STMT_BULK_EXECUTE => "COM_STMT_BULK_EXECUTE",
        _ => NAMES
            .get(usize::from(cmd))
            .copied()
            .unwrap_or("COM_UNKNOWN"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_numbers() {
        assert_eq!(command_name(COM_QUERY), "COM_QUERY");
        assert_eq!(command_name(COM_CHANGE_USER), "COM_CHANGE_USER");
        assert_eq!(command_name(COM_STMT_FETCH), "COM_STMT_FETCH");
        assert_eq!(command_name(COM_RESET_CONNECTION), "COM_RESET_CONNECTION");
        assert_eq!(command_name(COM_STMT_BULK_EXECUTE), "COM_STMT_BULK_EXECUTE");
        assert_eq!(command_name(0x20), "COM_UNKNOWN");
        assert_eq!(CLIENT_DEPRECATE_EOF, 0x0100_0000);
        assert_eq!(CLIENT_SECURE_CONNECTION, 0x8000);
        assert_eq!(MARIADB_CLIENT_CACHE_METADATA >> 32, 0x10);
        assert_eq!(sqlstate(ER_ACCESS_DENIED_ERROR), b"28000");
        assert_eq!(sqlstate(ER_NET_PACKETS_OUT_OF_ORDER), b"08S01");
        assert_eq!(sqlstate(ER_NO_SERVER), b"HY000");
        assert!(is_client_code(2013) && is_client_code(5001));
        assert!(!is_client_code(ER_CONNECTION_KILLED) && !is_client_code(ER_NO_SERVER));
        assert_eq!(sqlstate(ER_CON_COUNT_ERROR), b"08004");
    }
}
