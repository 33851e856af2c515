//! `SHOW VERSION`.

use crate::admin::table::{Table, Type};

pub fn table() -> Table {
    let mut t = Table::new(&[("version", Type::Text)]);
    t.push(vec![crate::admin::PRODUCT.into()]);
    t
}
