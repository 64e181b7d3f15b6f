#[mysqlq::job(queue = "emails")]
struct SendEmail {
    to: String,
}

fn main() {}
