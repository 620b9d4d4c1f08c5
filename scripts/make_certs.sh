#!/usr/bin/env bash
# Makes the certificates of a cluster's mutual TLS: a CA, and a certificate
# and key for each role, signed by it.
#
#   scripts/make_certs.sh DIR [--hosts h1,h2,...] [--roles r1,r2,...] [--days N]
#                             [--owner UID]
#
# DIR gets ca.pem and ca.key, and <role>.pem and <role>.key for each role
# (default: chief, worker, ps, fulcrumctl, etcd). A role's certificate names it
# as its subject's common name and as a URI SAN, fulcrum://<role>; its DNS
# and IP SANs are localhost, 127.0.0.1 and the --hosts (the names peers
# dial: service names in docker-compose or Kubernetes), so that clients can
# check the server they reach. An existing CA in DIR is kept, so that certificates made later
# (a new role, a rotation) are trusted by the peers that trust it already.
# Keys are EC P-256, readable by the owner only: with --owner, the roles'
# files go to user UID (as root; the image's daemons run as 10001), and the
# CA's key stays with the caller. Needs openssl.
set -euo pipefail

usage() {
  sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

case "${1:-}" in '' | -h | --help | -*) usage ;; esac
dir=$1
shift
hosts=""
roles="chief,worker,ps,fulcrumctl,etcd"
days=365
owner=""
while [ $# -gt 0 ]; do
  case "$1" in
    --hosts) hosts=${2:?--hosts needs a comma-separated list}; shift 2 ;;
    --roles) roles=${2:?--roles needs a comma-separated list}; shift 2 ;;
    --days) days=${2:?--days needs a number}; shift 2 ;;
    --owner) owner=${2:?--owner needs a user id}; shift 2 ;;
    -h | --help) usage ;;
    *) echo "make_certs.sh: unknown argument '$1'" >&2; usage ;;
  esac
done
command -v openssl > /dev/null || { echo "make_certs.sh: openssl is not installed" >&2; exit 1; }

mkdir -p "$dir"
umask 077
if [ ! -f "$dir/ca.pem" ] || [ ! -f "$dir/ca.key" ]; then
  openssl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
    -keyout "$dir/ca.key" -out "$dir/ca.pem" -days "$days" -subj "/CN=fulcrum-ca" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    2> /dev/null
  echo "made a CA: $dir/ca.pem"
fi

san="DNS:localhost,IP:127.0.0.1"
IFS=, read -r -a extra <<< "$hosts"
for host in "${extra[@]}"; do
  [ -n "$host" ] || continue
  if [[ $host =~ ^[0-9.]+$ || $host == *:* ]]; then san+=",IP:$host"; else san+=",DNS:$host"; fi
done

IFS=, read -r -a role_list <<< "$roles"
for role in "${role_list[@]}"; do
  [[ $role =~ ^[A-Za-z0-9_-]+$ ]] || { echo "make_certs.sh: bad role name '$role'" >&2; exit 2; }
  openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
    -keyout "$dir/$role.key" -out "$dir/$role.csr" -subj "/CN=$role" 2> /dev/null
  openssl x509 -req -in "$dir/$role.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
    -CAcreateserial -out "$dir/$role.pem.new" -days "$days" \
    -extfile <(printf '%s\n' "subjectAltName=URI:fulcrum://$role,$san" \
      "extendedKeyUsage=serverAuth,clientAuth" "keyUsage=critical,digitalSignature") \
    2> /dev/null
  mv "$dir/$role.pem.new" "$dir/$role.pem"  # whole, for daemons that watch it
  rm -f "$dir/$role.csr"
  echo "made $role: $dir/$role.pem ($san)"
done
rm -f "$dir/ca.srl"
if [ -n "$owner" ]; then
  for role in "${role_list[@]}"; do chown "$owner" "$dir/$role.pem" "$dir/$role.key"; done
  chown "$owner" "$dir/ca.pem"
fi
