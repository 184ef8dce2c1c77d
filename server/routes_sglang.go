package server

import (
	"fmt"
	"net/http"
	"strings"
)

// sglangRoutes registers the routes that complete SGLang's HTTP surface:
// the OpenAI-protocol spellings of /tokenize and /detokenize, SGLang's
// /get_memory_pool_size, the OpenAI Responses API and the Anthropic
// Messages API (both run on the chat completions path).
func (s *Server) sglangRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/tokenize", s.handleTokenize)
	mux.HandleFunc("POST /v1/detokenize", s.handleDetokenize)
	mux.HandleFunc("GET /get_memory_pool_size", s.handleMemoryPoolSize)
	mux.HandleFunc("POST /v1/responses", s.handleResponses)
	for _, route := range []string{"GET /v1/responses/{id}", "DELETE /v1/responses/{id}", "POST /v1/responses/{id}/cancel", "GET /v1/responses/{id}/input_items"} {
		mux.HandleFunc(route, handleStoredResponse)
	}
	mux.HandleFunc("POST /v1/messages", s.handleMessages)
	mux.HandleFunc("POST /v1/messages/count_tokens", s.handleCountTokens)
}

// handleMemoryPoolSize answers SGLang's /get_memory_pool_size: the KV
// cache's size in tokens, as a bare JSON number.
func (s *Server) handleMemoryPoolSize(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.eng.MaxTotalTokens())
}

// nonNil is ids, or an empty slice (JSON []) when ids is nil.
func nonNil(ids []int32) []int32 {
	if ids == nil {
		return []int32{}
	}
	return ids
}

// routeError writes an error met before a route's handler runs (API key,
// body limits) in the shape of the route's API: Anthropic's for
// /v1/messages, else SGLang's and OpenAI's (writeError).
func routeError(w http.ResponseWriter, r *http.Request, err error) {
	if strings.HasPrefix(r.URL.Path, "/v1/messages") {
		writeAnthropicError(w, err)
		return
	}
	writeError(w, err)
}

// responseModel is the model a response names: the request's model field,
// which SGLang echoes whatever it is, or the served name when the request
// gave none.
func (s *Server) responseModel(requested string) string {
	if requested == "" {
		return s.opt.ModelName
	}
	return requested
}

// handleStoredResponse answers the routes of stored responses: kt stores
// none, so every id is unknown.
func handleStoredResponse(w http.ResponseWriter, r *http.Request) {
	writeError(w, &apiError{Status: http.StatusNotFound, Type: "invalid_request_error", Param: "response_id",
		Message: fmt.Sprintf("Response with id '%s' not found: kt stores no responses (store is answered false)", r.PathValue("id"))})
}
