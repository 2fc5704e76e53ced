struct BinaryEncoder: Encoder {
    let output: BinaryOutput
    let path: BinaryPath
    var codingPath: [any CodingKey] { path.full }
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        KeyedEncodingContainer(
            BinaryKeyedEncoding<Key>(output: output, id: output.openContainer("K"), path: path)
        )
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        BinaryUnkeyedEncoding(output: output, id: output.openContainer("U"), path: path)
    }

    func singleValueContainer() -> any SingleValueEncodingContainer {
        BinarySingleValueEncoding(output: output, id: output.openContainer("S"), path: path)
    }
}

extension BinaryEncoder {
    /// An encoder for a super class's value: its container is written inside an `S` structure's slot.
    func superStructure() -> any Encoder {
        _ = output.openContainer("S")
        output.bytes.append(3)
        return self
    }
}
