package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// apiError is an error with an HTTP status. writeError writes it in the
// shape both SGLang's and OpenAI's clients read (errorBody).
type apiError struct {
	Status  int
	Type    string // invalid_request_error, authentication_error, ...
	Param   string
	Code    string
	Message string
}

func (e *apiError) Error() string { return e.Message }

func badRequest(param, format string, a ...any) *apiError {
	return &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: param, Message: fmt.Sprintf(format, a...)}
}

// errorBody is an error response: SGLang's ErrorResponse at the top level
// ({"object": "error", "message", "type", "param", "code": the status}),
// which raw-HTTP clients written for SGLang read, with OpenAI's
// {"error": {...}} beside it, which the OpenAI SDKs read.
type errorBody struct {
	Object  string      `json:"object"`
	Message string      `json:"message"`
	Type    string      `json:"type"`
	Param   *string     `json:"param"`
	Code    int         `json:"code"`
	Error   errorDetail `json:"error"`
}

type errorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    any     `json:"code"`
}

// asAPIError is err as an apiError; errors that are not apiErrors are
// internal (500).
func asAPIError(err error) *apiError {
	var ae *apiError
	if !errors.As(err, &ae) {
		ae = &apiError{Status: http.StatusInternalServerError, Type: "internal_server_error", Message: err.Error()}
	}
	return ae
}

// sglangErrorType is the type SGLang's ErrorResponse gives an error of
// this status (its exception class names).
func sglangErrorType(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "BadRequestError"
	case http.StatusUnauthorized:
		return "AuthenticationError"
	case http.StatusNotFound:
		return "NotFoundError"
	case http.StatusInternalServerError:
		return "InternalServerError"
	}
	return strings.ReplaceAll(http.StatusText(status), " ", "") + "Error"
}

// writeError writes err as an error body (errorBody).
func writeError(w http.ResponseWriter, err error) {
	ae := asAPIError(err)
	body := errorBody{Object: "error", Message: ae.Message, Type: sglangErrorType(ae.Status), Code: ae.Status,
		Error: errorDetail{Message: ae.Message, Type: ae.Type, Code: ae.Code}}
	if ae.Code == "" {
		body.Error.Code = ae.Status
	}
	if ae.Param != "" {
		body.Param = &ae.Param
		body.Error.Param = &ae.Param
	}
	armWriteDeadline(w)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(ae.Status)
	_ = json.NewEncoder(w).Encode(body)
}

// decodeJSON reads a JSON request body into v, turning the decoder's
// errors into 400s that say what is wrong and where. Handler has already
// read the body within the body limits.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	data, err := io.ReadAll(r.Body)
	if err != nil {
		return badRequest("", "reading the request body: %v", err)
	}
	if len(strings.TrimSpace(string(data))) == 0 {
		return badRequest("", "the request body is empty; send a JSON object")
	}
	if err := json.Unmarshal(data, v); err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			return badRequest("", "invalid JSON at byte %d: %v", se.Offset, se)
		case errors.As(err, &te):
			field := strings.TrimPrefix(te.Field, "samplingFields.")
			if field == "" {
				return badRequest("", "the request body must be a JSON object, not %s", te.Value)
			}
			return badRequest(field, "field %q: expected %s, got JSON %s", field, jsonTypeName(te.Type.String()), te.Value)
		default:
			return badRequest("", "invalid request: %v", err)
		}
	}
	return nil
}

func jsonTypeName(goType string) string {
	switch {
	case strings.HasPrefix(goType, "[]"):
		return "an array"
	case strings.HasPrefix(goType, "map[") || strings.Contains(goType, "struct") || strings.HasPrefix(goType, "server."):
		return "an object"
	case strings.Contains(goType, "int"):
		return "an integer"
	case strings.Contains(goType, "float"):
		return "a number"
	case goType == "string" || goType == "*string":
		return "a string"
	case strings.Contains(goType, "bool"):
		return "a boolean"
	}
	return goType
}
