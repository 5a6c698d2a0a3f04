# Sourced by the env scripts: unpack_source SRC DEST unpacks a source archive (.tar.gz), a local path or an http(s)
# URL, into DEST without its top folder (GitHub's archives hold one: <repo>-<commit>/).
unpack_source() {
  mkdir -p "$2"
  case $1 in
    http*://*) curl -fsSL "$1" | tar -xz -C "$2" --strip-components=1 ;;
    *) tar -xzf "$1" -C "$2" --strip-components=1 ;;
  esac
}
