#include <string.h>

#include "xfer.h"

const char *xfer_strerror(int err)
{
	if (err < 0)
		err = -err;
	switch (err) {
	case 0:
		return "success";
	case XFER_EBADWIRE:
		return "malformed address or descriptor bytes";
	case XFER_EVERSION:
		return "address or descriptor of an unsupported version";
	case XFER_EFOREIGN:
		return "descriptor belongs to another engine than the peer";
	case XFER_EPROVIDER:
		return "address was made by a different provider";
	case XFER_EPEER:
		return "peer failed or is unreachable";
	case XFER_EFABRIC:
		return "provider error with no errno equivalent";
	case XFER_ENOGPU:
		return "no GPU or CUDA driver available";
	case XFER_ENOPROV:
		return "no provider matches the request";
	default:
		/* strerror's buffer is static but only for unknown codes, which glibc
		 * formats; known errno strings are constants. */
		return err < 256 ? strerror(err) : "unknown xfer error";
	}
}
