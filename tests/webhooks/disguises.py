"""Loopback, private, link-local and metadata addresses in every disguise we know of: the
corpus the egress tests send through every door (tests/webhooks/test_egress*.py)."""

PUBLIC = "93.184.215.14"

# What the mock resolver answers for names (real DNS is never asked).
NAMES = {
    "localhost": ["127.0.0.1"],
    "metadata.google.internal": ["169.254.169.254"],
    "metadata.ec2.example.com": ["fd00:ec2::254"],
    "intranet.example.com": ["10.0.0.7"],
    "mixed.example.com": [PUBLIC, "192.168.0.1"],  # one private answer is enough to refuse
    "mapped.example.com": ["::ffff:127.0.0.1"],
    "cgnat.example.com": ["100.64.1.1"],
    "hooks.example.com": [PUBLIC],
}

# Loopback, private, link-local and metadata addresses in every disguise we know of.
DISGUISED = [
    # plain
    "http://127.0.0.1/",
    "http://127.0.0.1:8790/hooks",
    "http://10.0.0.1/",
    "http://172.16.0.1/",
    "http://192.168.1.1/",
    "http://100.64.0.1/",  # shared address space (carrier-grade NAT)
    "http://[fec0::1]/",  # IPv6 site-local, which Python calls global
    "http://169.254.169.254/latest/meta-data/",  # cloud metadata
    "http://0.0.0.0/",
    "http://224.0.0.1/",  # multicast
    "http://240.0.0.1/",  # reserved
    "http://255.255.255.255/",
    # numbers that inet_aton reads as 127.0.0.1
    "http://2130706433/",  # decimal
    "http://017700000001/",  # octal
    "http://0177.0.0.1/",
    "http://127.000.000.001/",  # zeros first
    "http://0x7f.1/",  # hex
    "http://0x7f000001/",
    "http://0x7f.0x0.0x0.0x1/",
    "http://127.1/",  # short forms
    "http://0/",
    # trailing dots and case
    "http://127.0.0.1./",
    "http://localhost/",
    "http://localhost./",
    "http://LOCALHOST/",
    # IDNA: full-width digits and dots, ideographic full stops
    "http://\uff11\uff12\uff17\uff0e\uff10\uff0e\uff10\uff0e\uff11/",
    "http://127\u30020\u30020\u30021/",
    "http://\uff4c\uff4f\uff43\uff41\uff4c\uff48\uff4f\uff53\uff54/",
    # IPv6
    "http://[::1]/",
    "http://[0:0:0:0:0:0:0:1]/",
    "http://[::]/",
    "http://[::ffff:127.0.0.1]/",  # IPv4-mapped
    "http://[::ffff:7f00:1]/",
    "https://[::ffff:a9fe:a9fe]/",  # mapped metadata
    "http://[::127.0.0.1]/",  # IPv4-compatible
    "http://[64:ff9b::7f00:1]/",  # NAT64
    "http://[64:ff9b::a9fe:a9fe]/",
    "http://[2002:7f00:1::]/",  # 6to4
    "http://[2002:a9fe:a9fe::1]/",
    "http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/",  # Teredo
    "http://[fe80::1]/",
    "http://[fe80::1%25eth0]/",  # with a zone
    "http://[fd00::1]/",
    "http://[fd00:ec2::254]/",  # EC2's IPv6 metadata
    # userinfo, backslashes, encoded delimiters, fragments and queries
    "http://8.8.8.8@127.0.0.1/",
    "http://127.0.0.1:8790\\@8.8.8.8/",  # the finding: urlsplit saw 8.8.8.8
    "http://127.0.0.1:8790%5C@8.8.8.8/",  # the finding, encoded
    "http://127.0.0.1:8790%5c%408.8.8.8/",
    "http://8.8.8.8\\127.0.0.1/",
    "http:\\\\127.0.0.1\\",
    "http://127.0.0.1%2F@8.8.8.8/",
    "http://127.0.0.1%3A8790@8.8.8.8/",
    "http://127.0.0.1%23@8.8.8.8/",
    "http://127.0.0.1%3F@8.8.8.8/",
    "http://127.0.0.1%00.example.com/",
    "http://8.8.8.8#@127.0.0.1/",
    "http://127.0.0.1?@8.8.8.8/",
    "http://8.8.8.8/#@127.0.0.1:8790/",
    # other schemes
    "gopher://127.0.0.1:6379/_INFO",
    "file:///etc/passwd",
    "dict://127.0.0.1:11211/stats",
    # names that resolve to local space
    "http://metadata.google.internal/computeMetadata/v1/",
    "http://metadata.ec2.example.com/",
    "http://intranet.example.com/",
    "http://mixed.example.com/",
    "http://mapped.example.com/",
    "http://cgnat.example.com/",
]
