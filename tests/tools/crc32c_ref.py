"""CRC-32C for the test tools, written independently of dtrain's C code
(read_events.py, t2t_files.py, safetensors_check.py): Castagnoli's CRC
(reflected polynomial 0x82F63B78) and TFRecord's mask of it,
((crc >> 15) | (crc << 17)) + 0xa282ead8, both modulo 2^32."""


def _table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


TABLE = _table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF
