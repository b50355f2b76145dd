"""HTTP errors in OpenAI's shape: {"error": {"message", "type", "param", "code"}}.

Role in the data flow: validation (params.py), security (security.py) and the routes raise APIError;
app.py turns it (and anything unexpected, without a traceback) into a JSON response.
"""
from http import HTTPStatus

TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
         404: "not_found_error", 405: "invalid_request_error", 413: "invalid_request_error",
         429: "rate_limit_error", 500: "server_error", 503: "server_error"}


class APIError(Exception):
    def __init__(self, status, message, param=None, code=None):
        super().__init__(status, message, param, code)
        self.status, self.message, self.param = int(status), str(message), param
        self.code = code if code is not None else _default_code(self.status)

    def body(self):
        return error_body(self.status, self.message, self.param, self.code)


def error_body(status, message, param=None, code=None):
    return {"error": {"message": message, "type": TYPES.get(status, "invalid_request_error"),
                      "param": param, "code": code if code is not None else _default_code(status)}}


def _default_code(status):
    try:
        return HTTPStatus(status).phrase.lower().replace(" ", "_")
    except ValueError:
        return None


def bad_param(param, message):
    """400 naming the parameter."""
    return APIError(400, f"{param}: {message}", param=param, code="invalid_value")
