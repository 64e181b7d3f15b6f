#[mysqlq::job]
async fn send_email(to: String) {
    let _ = to;
}

fn main() {}
